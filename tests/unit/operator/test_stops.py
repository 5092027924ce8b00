"""A replica that stops with a checkpoint (exit 42 and the trainer's termination message):
the operator records the step in status.checkpoint, says it in the Suspended condition and
in events, and says the job resumes from it, once, whether a decision saw the pod or only
its DELETED event."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.builders import JOB, NOW, decide_observing, job_view, pod, replica_spec, services

from tfjob_operator.controller import Caches
from tfjob_operator.observe import PodObservation
from tfjob_operator.plan import Plan
from tfjob_operator.stops import Stop, stop_of
from tfjob_operator.watchcache import Store
from tfjob_trainer.stop_report import report_checkpoint

MWMS = {"tfReplicaSpecs": {"Worker": replica_spec(2, "ExitCode")}}
SUSPENDED = {**MWMS, "runPolicy": {"suspend": True}}
WORKERS = ("worker-0", "worker-1")
MESSAGE = json.dumps({"checkpoint": {"epoch": 3, "step": 57}})


def stopped_pod(key: str, finished: str = "2026-11-22T12:00:20Z", **terminated: Any) -> Any:
    """A worker that exited 42 with the trainer's message, while being deleted."""
    state = {
        "name": "tensorflow",
        "state": {
            "terminated": {
                "exitCode": 42,
                "reason": "Error",
                "message": MESSAGE,
                "finishedAt": finished,
                **terminated,
            }
        },
    }
    return pod(MWMS, key, "Failed", terminating=True, status={"containerStatuses": [state]})


def run(
    spec: dict[str, Any], pods: list[PodObservation], status: dict[str, Any], **kwargs: Any
) -> Plan:
    return decide_observing(job_view(spec, status), pods, services(spec), NOW, **kwargs)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def reasons(plan: Plan) -> list[str]:
    return [event.reason for event in plan.events]


def test_the_trainers_message_is_what_the_operator_reads(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert not report_checkpoint(3, 57, str(log)), "no file to write: not in a pod"
    log.touch()
    assert report_checkpoint(3, 57, str(log))
    terminated = {"exitCode": 42, "message": log.read_text(), "finishedAt": "2026-11-22T12:00:20Z"}
    assert stop_of(terminated) == Stop(epoch=3, step=57, at="2026-11-22T12:00:20Z")


@pytest.mark.parametrize(
    "terminated",
    [
        {"exitCode": 1, "message": MESSAGE},
        {"exitCode": 42, "message": "lost a peer"},
        {"exitCode": 42, "message": json.dumps({"checkpoint": {"step": 57}})},
        {"exitCode": 42, "message": json.dumps({"checkpoint": {"epoch": 3, "step": -1}})},
        {"exitCode": 42, "message": json.dumps({"checkpoint": {"epoch": "3", "step": 57}})},
        {"exitCode": 42, "message": json.dumps(["checkpoint"])},
    ],
)
def test_only_an_exit_42_with_the_whole_message_is_a_stop(terminated: dict[str, Any]) -> None:
    assert stop_of({**terminated, "finishedAt": "2026-11-22T12:00:20Z"}) is None


def test_a_suspended_jobs_stop_is_recorded_said_and_resumed_from_once() -> None:
    running = run(MWMS, [pod(MWMS, k) for k in WORKERS], {}).status
    assert running is not None
    suspending = run(SUSPENDED, [pod(MWMS, k) for k in WORKERS], running)
    assert suspending.status is not None
    assert "checkpoint" not in suspending.status

    # Both workers stop at the agreed step, a second apart: one record, one event.
    stopped = [stopped_pod("worker-0"), stopped_pod("worker-1", "2026-11-22T12:00:21Z")]
    plan = run(SUSPENDED, stopped, suspending.status)
    assert plan.status is not None
    assert plan.status["checkpoint"] == {
        "step": 57,
        "epoch": 3,
        "stoppedAt": "2026-11-22T12:00:21Z",
    }
    assert reasons(plan) == ["Checkpointed"]
    assert "at step 57 (epoch 3)" in plan.events[0].message
    held = condition(plan.status, "Suspended")
    assert held["message"].endswith("Its replicas stopped with a checkpoint at step 57 (epoch 3).")
    assert run(SUSPENDED, stopped, plan.status).events == ()

    later = NOW + timedelta(minutes=5)
    resumed = decide_observing(job_view(MWMS, plan.status), [], services(MWMS), later)
    assert resumed.status is not None
    assert condition(resumed.status, "Suspended")["message"] == (
        "TFJob ml/mnist is resumed from the checkpoint at step 57 (epoch 3)."
    )
    (event,) = resumed.events
    assert (event.reason, event.message) == (
        "TFJobResumed",
        "Resumed from the checkpoint at step 57 (epoch 3): creating the replicas again",
    )
    assert resumed.status["checkpoint"]["resumedAt"] == "2026-11-22T12:05:00Z"

    # Suspended again with no checkpoint written: nothing claims the old one.
    again = run(SUSPENDED, [pod(MWMS, k) for k in WORKERS], resumed.status)
    assert again.status is not None
    assert "checkpoint" not in condition(again.status, "Suspended")["message"]


def test_a_stop_seen_only_in_a_deleted_pods_last_state_is_recorded() -> None:
    suspending = run(SUSPENDED, [pod(MWMS, k) for k in WORKERS], {}).status
    assert suspending is not None
    last = stopped_pod("worker-0").stopped
    plan = run(SUSPENDED, [], suspending, stopped=last)
    assert plan.status is not None
    assert plan.status["checkpoint"]["step"] == 57
    assert reasons(plan) == ["Checkpointed"]


def test_a_restart_after_a_stop_restarts_from_its_checkpoint() -> None:
    running = run(MWMS, [pod(MWMS, k) for k in WORKERS], {}).status
    assert running is not None
    (stopped,) = [stopped_pod("worker-0")]
    plan = run(MWMS, [stopped, pod(MWMS, "worker-1")], running)
    assert plan.status is not None
    restarting = condition(plan.status, "Restarting")["message"]
    assert "restarting worker-0, worker-1 from the checkpoint at step 57 (epoch 3)" in restarting
    assert reasons(plan) == ["Checkpointed", "TFJobRestarting"]
    assert plan.status["checkpoint"]["resumedAt"] == "2026-11-22T12:00:00Z"


def test_a_deleted_pods_stop_is_kept_for_its_job_alone_and_forgotten_with_it() -> None:
    caches = Caches(Store(), Store(), Store())
    key = (JOB.namespace, JOB.name)
    stopped = stopped_pod("worker-0")
    caches.pod_deleted(key, stopped)
    assert caches.stops.get(key, JOB.uid) is None, "a job gone first keeps nothing"
    caches.jobs.put(JOB.uid, key, job_view(MWMS))
    caches.pod_deleted(key, stopped)
    caches.pod_deleted(key, pod(MWMS, "worker-1", "Failed", exit_code=143, terminating=True))
    assert caches.stops.get(key, JOB.uid) == stopped.stopped
    assert caches.stops.get(key, "the-uid-of-a-new-job-of-that-name") is None
    caches.stops.forget(key)
    assert caches.stops.get(key, JOB.uid) is None
