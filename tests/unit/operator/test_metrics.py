"""The job metrics: what a status write counts (transitions.py) and how the counts are
served (metrics.py), under Kubeflow's names and the operator's own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from support.builders import JOB, NOW

from tfjob_operator import conditions as cond
from tfjob_operator.api import ConditionType
from tfjob_operator.job_view import JobView
from tfjob_operator.metrics import Metrics
from tfjob_operator.observe import RestartCause
from tfjob_operator.timeutil import to_rfc3339
from tfjob_operator.transitions import Transitions, transitions

CREATED = to_rfc3339(NOW - timedelta(seconds=100))
KEY = (JOB.namespace, JOB.name)


def at(seconds: float) -> str:
    """NOW moved by `seconds`, as a status timestamp."""
    return to_rfc3339(NOW + timedelta(seconds=seconds))


def status(*phases: tuple[ConditionType, float], **fields: Any) -> dict[str, Any]:
    """A status whose conditions turned True in order, each at its time (seconds from
    NOW), Created first, with the other `fields`."""
    conditions = cond.set_condition([], ConditionType.CREATED, True, "TFJobCreated", "", CREATED)
    for kind, seconds in phases:
        reason = {ConditionType.FAILED: "BackoffLimitExceeded"}.get(kind, f"TFJob{kind.value}")
        conditions = cond.set_condition(conditions, kind, True, reason, "", at(seconds))
    return {"conditions": conditions, "state": cond.state(conditions), **fields}


def job(before: dict[str, Any] | None = None, *, queued: bool = False) -> JobView:
    return JobView(
        JOB,
        "1",
        1,
        False,
        {},
        before or {},
        created=CREATED,
        queue="team-a" if queued else None,
    )


def test_the_first_status_is_the_job_created() -> None:
    assert transitions(job(), status(), NOW, None) == Transitions(created=True)
    assert transitions(job(status()), status(), NOW, None) == Transitions()


def test_a_start_is_timed_from_start_time_to_running_once_per_run() -> None:
    before = status(startTime=at(-90))
    running = status((ConditionType.RUNNING, -30), startTime=at(-90))
    first = transitions(job(before), running, NOW, None)
    assert (first.entered, first.started_after, first.start_time) == (
        ConditionType.RUNNING,
        60.0,
        at(-90),
    )
    # Running again after a pod waited in this run: the start was counted.
    assert transitions(job(before), running, NOW, at(-90)).started_after is None
    # Running again after a restart: not a start, even for a leader that did not count it.
    restarting = status(
        (ConditionType.RUNNING, -30), (ConditionType.RESTARTING, -20), startTime=at(-90)
    )
    again = status(
        (ConditionType.RUNNING, -30),
        (ConditionType.RESTARTING, -20),
        (ConditionType.RUNNING, -10),
        startTime=at(-90),
    )
    assert transitions(job(restarting), again, NOW, None).started_after is None
    # A resumed job's run has a new startTime: its start counts.
    resumed = status((ConditionType.RUNNING, -10), startTime=at(-40))
    assert transitions(job(before), resumed, NOW, at(-90)).started_after == 30.0


def test_an_end_is_timed_from_creation_with_its_reason() -> None:
    running = status((ConditionType.RUNNING, -30))
    failed = status((ConditionType.RUNNING, -30), (ConditionType.FAILED, 0))
    changed = transitions(job(running), failed, NOW, None)
    assert (changed.entered, changed.finished_after, changed.finished_reason) == (
        ConditionType.FAILED,
        100.0,
        "BackoffLimitExceeded",
    )
    # Written again (a status that changes nothing else): not a second end.
    assert transitions(job(failed), failed, NOW, None).entered is None


def test_a_queued_job_waits_from_its_suspension_to_its_resumption() -> None:
    suspended = status((ConditionType.SUSPENDED, -70))
    resumed = {
        **suspended,
        "conditions": cond.set_condition(
            suspended["conditions"], ConditionType.SUSPENDED, False, "TFJobResumed", "", at(0)
        ),
    }
    assert transitions(job(suspended, queued=True), resumed, NOW, None).admitted_after == 70.0
    # Not queued (suspended by its spec): no admission to wait for.
    assert transitions(job(suspended), resumed, NOW, None).admitted_after is None
    # Admitted before the operator first saw it: the wait is since its creation.
    assert transitions(job(queued=True), status(), NOW, None).admitted_after == 100.0
    # Created suspended: still waiting.
    assert transitions(job(queued=True), suspended, NOW, None).admitted_after is None


def samples(metrics: Metrics) -> dict[str, float]:
    found = {}
    for line in metrics.exposition().decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def kubeflow(what: str) -> str:
    return f'training_operator_jobs_{what}_total{{framework="tensorflow",job_namespace="ml"}}'


def test_kubeflow_counters_and_own_metrics_count_a_job_by_namespace() -> None:
    metrics = Metrics()
    running = status((ConditionType.RUNNING, -30), startTime=at(-90))
    restarting = status(
        (ConditionType.RUNNING, -30), (ConditionType.RESTARTING, -20), startTime=at(-90)
    )
    succeeded = status(
        (ConditionType.RUNNING, -30),
        (ConditionType.RESTARTING, -20),
        (ConditionType.SUCCEEDED, 0),
        startTime=at(-90),
    )
    writes: list[tuple[dict[str, Any], dict[str, Any], tuple[RestartCause, ...]]] = [
        ({}, status(startTime=at(-90)), ()),
        (status(startTime=at(-90)), running, ()),
        (running, restarting, (RestartCause.DISRUPTED,)),
        (restarting, succeeded, ()),
    ]
    for before, after, restarted in writes:
        metrics.status_written(job(before), after, restarted, NOW)
        metrics.job_state(KEY, after["state"])
    found = samples(metrics)
    assert {name: found[kubeflow(name)] for name in ("created", "restarted", "successful")} == {
        "created": 1.0,
        "restarted": 1.0,
        "successful": 1.0,
    }
    # Served from the namespace's first job, at 0 until a job fails.
    assert found[kubeflow("failed")] == 0
    assert found['tfjob_operator_restarts_total{job_namespace="ml",reason="Disrupted"}'] == 1
    assert found['tfjob_operator_jobs{job_namespace="ml",state="Succeeded"}'] == 1
    # The states the job left are no series any more.
    assert not [name for name in found if name.startswith("tfjob_operator_jobs{") and "Run" in name]
    assert found['tfjob_operator_job_start_seconds_sum{job_namespace="ml"}'] == 60.0
    duration = 'tfjob_operator_job_duration_seconds_sum{job_namespace="ml",state="Succeeded"}'
    assert found[duration] == 100.0
    finished = (
        'tfjob_operator_jobs_finished_total{job_namespace="ml",reason="TFJobSucceeded",'
        'state="Succeeded"}'
    )
    assert found[finished] == 1
    assert not [name for name in found if name.endswith("_created")]


def test_a_deleted_job_is_counted_once_and_leaves_no_series() -> None:
    metrics = Metrics()
    metrics.job_state(KEY, "Running")
    metrics.job_deleted(KEY)
    metrics.job_deleted(KEY)  # seen gone again: counted once
    metrics.job_deleted(("other", "unknown"))  # never known to this operator
    found = samples(metrics)
    assert found[kubeflow("deleted")] == 1
    assert not [name for name in found if name.startswith("tfjob_operator_jobs{")]


def test_refusals_count_by_kind_and_the_api_servers_reason() -> None:
    metrics = Metrics()
    metrics.refused("ml", "pod", "Forbidden")
    metrics.refused("ml", "pod", "Forbidden")
    metrics.refused("ml", "service", "Invalid")
    found = samples(metrics)
    assert (
        found['tfjob_operator_refusals_total{job_namespace="ml",kind="pod",reason="Forbidden"}']
        == 2
    )
    assert (
        found['tfjob_operator_refusals_total{job_namespace="ml",kind="service",reason="Invalid"}']
        == 1
    )
