"""The controller's state machine: every transition, decided without a cluster."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from support.builders import (
    JOB,
    NOW,
    decide_observing,
    job_view,
    pod,
    pod_group_writes,
    replica_spec,
    services,
)

from tfjob_operator.api import KUBEFLOW, JobRef
from tfjob_operator.job_view import JobView
from tfjob_operator.observe import PodObservation, RestartCause, WorkloadObservation
from tfjob_operator.plan import Plan
from tfjob_operator.refusals import Refusal
from tfjob_operator.spec import MAX_CHILD_NAME, MAX_REPLICAS
from tfjob_operator.tfconfig import MAX_ENVIRONMENT_STRING

MWMS = {
    "tfReplicaSpecs": {"Chief": replica_spec(1, "ExitCode"), "Worker": replica_spec(2, "ExitCode")}
}
PSS = {
    "tfReplicaSpecs": {
        "Chief": replica_spec(1, "ExitCode"),
        "Worker": replica_spec(2, "ExitCode"),
        "PS": replica_spec(1, "ExitCode"),
    }
}
ALL_MWMS = ("chief-0", "worker-0", "worker-1")
#: A job of as many replicas as a TFJob may have.
BOUND: dict[str, Any] = {"tfReplicaSpecs": {"Worker": replica_spec(MAX_REPLICAS)}}

ALL_PSS = ("chief-0", "worker-0", "worker-1", "ps-0")


def created(plan: Plan) -> list[str]:
    return sorted(p.name for p in plan.create_pods)


def deleted(plan: Plan) -> list[str]:
    return sorted(d.name for d in plan.delete_pods)


def written(plan: Plan) -> dict[str, Any]:
    """The status the plan writes; a decision that writes none fails the test here."""
    assert plan.status is not None, "the decision writes no status"
    return plan.status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def run(
    spec: dict[str, Any],
    pods: Sequence[PodObservation],
    status: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Plan:
    return decide_observing(
        job_view(spec, status), pods, services(spec), kwargs.pop("now", NOW), **kwargs
    )


def settle(
    spec: dict[str, Any],
    pods: Sequence[PodObservation],
    status: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Runs one decision and returns the status it leaves (the old one if unchanged)."""
    plan = run(spec, pods, status, **kwargs)
    return plan.status if plan.status is not None else (status or {})


def test_new_job_creates_every_pod_and_service() -> None:
    plan = decide_observing(job_view(PSS), [], [], NOW)
    assert created(plan) == ["mnist-chief-0", "mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    assert sorted(s.name for s in plan.create_services) == created(plan)
    assert plan.status is not None
    assert condition(written(plan), "Created")["status"] == "True"
    assert written(plan)["state"] == "Created"
    assert written(plan)["startTime"] == "2026-11-22T12:00:00Z"


def test_all_pods_running_means_running_and_nothing_to_do() -> None:
    status = settle(MWMS, [])
    plan = run(MWMS, [pod(MWMS, k) for k in ALL_MWMS], status)
    assert (plan.create_pods, plan.delete_pods, plan.create_services) == ((), (), ())
    assert written(plan)["state"] == "Running"
    assert written(plan)["replicaStatuses"]["Worker"]["active"] == 2
    assert written(plan)["activeReplicas"] == 3
    again = run(MWMS, [pod(MWMS, k) for k in ALL_MWMS], plan.status)
    assert again.status is None, "a settled job must not be written again"


def test_chief_success_completes_and_cleans_running_pods() -> None:
    status = settle(PSS, [pod(PSS, k) for k in ALL_PSS])
    pods = [pod(PSS, "chief-0", "Succeeded", exit_code=0)] + [
        pod(PSS, k) for k in ("worker-0", "worker-1", "ps-0")
    ]
    plan = run(PSS, pods, status)
    assert written(plan)["state"] == "Succeeded"
    assert written(plan)["completionTime"] == "2026-11-22T12:00:00Z"
    assert written(plan)["replicaStatuses"]["Chief"]["succeeded"] == 1
    assert deleted(plan) == ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    assert sorted(d.name for d in plan.delete_services) == deleted(plan)
    assert [e.reason for e in plan.events] == ["TFJobSucceeded"]
    assert plan.create_pods == ()


def test_counts_are_those_the_decision_leads_to() -> None:
    """Pods it creates count as active and pods it deletes do not: once the watch shows
    them come and go, the status is already right and is not written again."""
    new = run(PSS, [])
    assert written(new)["activeReplicas"] == 4
    status = settle(PSS, [pod(PSS, k) for k in ALL_PSS])
    pods = [pod(PSS, "chief-0", "Succeeded", exit_code=0)] + [
        pod(PSS, k) for k in ("worker-0", "worker-1", "ps-0")
    ]
    finished = run(PSS, pods, status)
    assert written(finished)["activeReplicas"] == 0
    assert all(d.collectable for d in finished.delete_pods + finished.delete_services)
    terminating = [pods[0]] + [
        pod(PSS, k, terminating=True) for k in ("worker-0", "worker-1", "ps-0")
    ]
    assert run(PSS, terminating, finished.status).status is None


def test_worker_zero_decides_success_without_chief() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, "ExitCode")}}
    plan = run(spec, [pod(spec, "worker-0", "Succeeded", exit_code=0), pod(spec, "worker-1")])
    assert written(plan)["state"] == "Succeeded"


def test_all_workers_policy_waits_for_every_worker() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2)}, "successPolicy": "AllWorkers"}
    plan = run(spec, [pod(spec, "worker-0", "Succeeded", exit_code=0), pod(spec, "worker-1")])
    assert written(plan)["state"] != "Succeeded"
    assert plan.delete_pods == ()
    done = [pod(spec, k, "Succeeded", exit_code=0) for k in ("worker-0", "worker-1")]
    assert written(run(spec, done, plan.status))["state"] == "Succeeded"


def test_ps_and_evaluator_never_decide_success() -> None:
    spec = {
        "tfReplicaSpecs": {
            "Worker": replica_spec(1),
            "PS": replica_spec(1),
            "Evaluator": replica_spec(1),
        }
    }
    pods = [
        pod(spec, "worker-0"),
        pod(spec, "ps-0", "Succeeded", exit_code=0),
        pod(spec, "evaluator-0", "Succeeded", exit_code=0),
    ]
    assert written(run(spec, pods))["state"] != "Succeeded"


def test_a_decision_is_a_function_of_its_inputs_and_changes_none_of_them() -> None:
    """decide() reads the job's persisted status and returns a new one: asked twice, it
    answers the same; the status it read, which the watch cache keeps, is as it was."""
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    kept = copy.deepcopy(status)
    pods = [pod(MWMS, "chief-0"), pod(MWMS, "worker-0", "Failed", exit_code=137)]

    def decided() -> tuple[Any, ...]:
        plan = run(MWMS, pods, status)
        creates = [c.name for c in (*plan.create_pods, *plan.create_services)]
        return (plan.status, deleted(plan), creates, plan.events, plan.requeue_after)

    first = decided()
    assert first[0] is not None
    assert first[0]["restartCount"] == 1
    assert decided() == first
    assert status == kept


def test_mwms_retryable_failure_restarts_the_whole_group_once() -> None:
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    pods = [
        pod(MWMS, "chief-0"),
        pod(MWMS, "worker-0"),
        pod(MWMS, "worker-1", "Failed", exit_code=137),
    ]
    plan = run(MWMS, pods, status)
    assert written(plan)["restartCount"] == 1
    assert written(plan)["replicaGenerations"] == {k: 1 for k in ALL_MWMS}
    assert written(plan)["state"] == "Restarting"
    message = condition(written(plan), "Restarting")["message"]
    assert "worker-1 exited with code 137" in message
    assert "chief-0, worker-0, worker-1" in message
    assert deleted(plan) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    assert plan.create_pods == (), "the new group waits until the old pods are gone"
    assert [e.reason for e in plan.events] == ["TFJobRestarting"]
    assert plan.restarted == (RestartCause.EXIT_CODE,)

    # The survivors die on their own (exit 42) while being deleted: the same restart.
    survivors = [
        pod(MWMS, "chief-0", "Failed", exit_code=42, terminating=True),
        pod(MWMS, "worker-0", "Failed", exit_code=42),
        pod(MWMS, "worker-1", "Failed", exit_code=137, terminating=True),
    ]
    again = run(MWMS, survivors, plan.status)
    assert settle(MWMS, survivors, plan.status)["restartCount"] == 1
    assert deleted(again) == ["mnist-worker-0"]
    assert again.restarted == (), "the same restart is counted once"
    assert again.create_pods == ()

    # Once every old pod is gone, the group comes back at generation 1.
    back = run(MWMS, [], plan.status)
    assert created(back) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]
    labels = {
        p.render()["metadata"]["labels"]["tfjob.dev/replica-generation"] for p in back.create_pods
    }
    assert labels == {"1"}


def test_failures_seen_together_are_all_named_in_one_restart() -> None:
    """A killed worker and a survivor that exited on losing it, reported at once."""
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    pods = [
        pod(MWMS, "chief-0"),
        pod(MWMS, "worker-0", "Failed", exit_code=42),
        pod(MWMS, "worker-1", "Failed", exit_code=137),
    ]
    plan = run(MWMS, pods, status)
    assert written(plan)["restartCount"] == 1
    message = condition(written(plan), "Restarting")["message"]
    assert message.startswith(
        "worker-0 exited with code 42, worker-1 exited with code 137; restarting "
        "chief-0, worker-0, worker-1"
    )


def test_restart_recorded_before_a_crash_is_not_counted_twice() -> None:
    """The operator wrote the restart, then died before deleting the pods."""
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    failed = [
        pod(MWMS, "chief-0"),
        pod(MWMS, "worker-0"),
        pod(MWMS, "worker-1", "Failed", exit_code=143),
    ]
    recorded = run(MWMS, failed, status).status
    plan = run(MWMS, failed, recorded)
    assert plan.status is None or written(plan)["restartCount"] == 1
    assert deleted(plan) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]


def test_exit_code_42_is_retryable() -> None:
    pods = [
        pod(MWMS, "chief-0", "Failed", exit_code=42),
        pod(MWMS, "worker-0"),
        pod(MWMS, "worker-1"),
    ]
    assert written(run(MWMS, pods, settle(MWMS, [])))["restartCount"] == 1


@pytest.mark.parametrize("code", [1, 2, 127])
def test_exit_code_1_to_127_fails_the_job(code: int) -> None:
    pods = [
        pod(MWMS, "chief-0"),
        pod(MWMS, "worker-0", "Failed", exit_code=code),
        pod(MWMS, "worker-1"),
    ]
    plan = run(MWMS, pods, settle(MWMS, []))
    assert written(plan)["state"] == "Failed"
    failed = condition(written(plan), "Failed")
    assert failed["reason"] == "ReplicaFailed"
    assert f"worker-0 exited with code {code}" in failed["message"]
    assert "ExitCode" in failed["message"]
    assert deleted(plan) == ["mnist-chief-0", "mnist-worker-1"]
    assert written(plan)["completionTime"]


def test_never_policy_fails_even_on_signal_exit() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, "Never")}}
    plan = run(spec, [pod(spec, "worker-0"), pod(spec, "worker-1", "Failed", exit_code=137)])
    assert written(plan)["state"] == "Failed"


@pytest.mark.parametrize(
    "disruption",
    [
        {"reason": "Evicted"},
        {
            "status": {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                    }
                ]
            }
        },
    ],
)
def test_disruption_is_retried_whatever_the_policy(disruption: dict[str, Any]) -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, "Never")}}
    pods = [pod(spec, "worker-0"), pod(spec, "worker-1", "Failed", **disruption)]
    plan = run(spec, pods, settle(spec, []))
    assert written(plan)["state"] == "Restarting"
    assert written(plan)["restartCount"] == 1
    assert plan.restarted == (RestartCause.DISRUPTED,)


def test_pod_deleted_by_someone_else_is_a_retryable_disruption() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, "Never")}}
    pods = [pod(spec, "worker-0"), pod(spec, "worker-1", terminating=True)]
    plan = run(spec, pods, settle(spec, []))
    assert written(plan)["restartCount"] == 1
    assert (
        "worker-1 was disrupted (PodDeleted)" in condition(written(plan), "Restarting")["message"]
    )


def test_ps_job_restarts_a_failed_worker_alone() -> None:
    status = settle(PSS, [pod(PSS, k) for k in ALL_PSS])
    pods = [pod(PSS, k) for k in ("chief-0", "worker-0", "ps-0")]
    pods.append(pod(PSS, "worker-1", "Failed", exit_code=137))
    plan = run(PSS, pods, status)
    assert written(plan)["replicaGenerations"] == {"worker-1": 1}
    assert deleted(plan) == ["mnist-worker-1"]
    assert written(plan)["replicaStatuses"]["Worker"]["restarts"] == 1
    back = run(PSS, [pod(PSS, k) for k in ("chief-0", "worker-0", "ps-0")], plan.status)
    assert created(back) == ["mnist-worker-1"]


def test_ps_job_restarts_everything_when_a_ps_fails() -> None:
    status = settle(PSS, [pod(PSS, k) for k in ALL_PSS])
    pods = [pod(PSS, k) for k in ("chief-0", "worker-0", "worker-1")]
    pods.append(pod(PSS, "ps-0", "Failed", exit_code=137))
    plan = run(PSS, pods, status)
    assert written(plan)["replicaGenerations"] == {k: 1 for k in ALL_PSS}
    assert deleted(plan) == sorted(f"mnist-{k}" for k in ALL_PSS)


def test_backoff_limit_stops_restarts_and_cleans_up() -> None:
    spec = {**MWMS, "runPolicy": {"backoffLimit": 1}}
    status = settle(spec, [pod(spec, k) for k in ALL_MWMS])
    first = run(
        spec,
        [
            pod(spec, "chief-0"),
            pod(spec, "worker-0"),
            pod(spec, "worker-1", "Failed", exit_code=137),
        ],
        status,
    )
    assert written(first)["restartCount"] == 1
    pods = [
        pod(spec, "chief-0", generation=1),
        pod(spec, "worker-0", "Failed", exit_code=137, generation=1),
        pod(spec, "worker-1", generation=1),
    ]
    second = run(spec, pods, first.status)
    assert written(second)["state"] == "Failed"
    assert condition(written(second), "Failed")["reason"] == "BackoffLimitExceeded"
    assert written(second)["restartCount"] == 1
    assert deleted(second) == ["mnist-chief-0", "mnist-worker-1"]


def test_in_place_restarts_count_against_backoff_limit() -> None:
    spec = {
        "tfReplicaSpecs": {"Worker": replica_spec(2, "OnFailure")},
        "runPolicy": {"backoffLimit": 2},
    }
    pods = [pod(spec, "worker-0", restarts=2), pod(spec, "worker-1", restarts=1)]
    plan = run(spec, pods, settle(spec, []))
    assert written(plan)["state"] == "Failed"
    assert condition(written(plan), "Failed")["reason"] == "BackoffLimitExceeded"


def test_active_deadline_fails_the_job_without_any_event() -> None:
    spec = {**MWMS, "runPolicy": {"activeDeadlineSeconds": 60}}
    status = settle(spec, [pod(spec, k) for k in ALL_MWMS])
    early = run(spec, [pod(spec, k) for k in ALL_MWMS], status, now=NOW + timedelta(seconds=20))
    assert early.requeue_after == pytest.approx(40)
    late = run(spec, [pod(spec, k) for k in ALL_MWMS], status, now=NOW + timedelta(seconds=61))
    assert written(late)["state"] == "Failed"
    assert condition(written(late), "Failed")["reason"] == "DeadlineExceeded"
    assert deleted(late) == [f"mnist-{k}" for k in ALL_MWMS]


def test_ttl_deletes_the_finished_job() -> None:
    spec = {**MWMS, "runPolicy": {"ttlSecondsAfterFinished": 30}}
    done = [pod(spec, "chief-0", "Succeeded", exit_code=0)]
    finished = written(run(spec, done, settle(spec, [])))
    assert finished["state"] == "Succeeded"
    waiting = run(spec, done, finished, now=NOW + timedelta(seconds=10))
    assert not waiting.delete_job
    assert waiting.requeue_after == pytest.approx(20)
    assert run(spec, done, finished, now=NOW + timedelta(seconds=30)).delete_job


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("Running", ["mnist-worker-1"]),
        ("All", ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]),
        ("None", []),
    ],
)
def test_clean_pod_policy(policy: str, expected: list[str]) -> None:
    spec = {**MWMS, "runPolicy": {"cleanPodPolicy": policy}}
    pods = [
        pod(spec, "chief-0", "Succeeded", exit_code=0),
        pod(spec, "worker-0", "Succeeded", exit_code=0),
        pod(spec, "worker-1"),
    ]
    plan = run(spec, pods, settle(spec, []))
    assert written(plan)["state"] == "Succeeded"
    assert deleted(plan) == expected
    services_deleted = sorted(d.name for d in plan.delete_services)
    assert services_deleted == expected


def test_clean_pod_policy_applies_after_backoff_failure_too() -> None:
    spec = {**MWMS, "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "All"}}
    pods = [
        pod(spec, "chief-0"),
        pod(spec, "worker-0"),
        pod(spec, "worker-1", "Failed", exit_code=137),
    ]
    plan = run(spec, pods, settle(spec, []))
    assert condition(written(plan), "Failed")["reason"] == "BackoffLimitExceeded"
    assert deleted(plan) == [f"mnist-{k}" for k in ALL_MWMS]


def test_finished_job_stays_finished() -> None:
    done = [pod(MWMS, "chief-0", "Succeeded", exit_code=0)]
    finished = written(run(MWMS, done, settle(MWMS, [])))
    # The chief's pod is garbage-collected later, and a worker even fails: nothing changes.
    later = run(MWMS, [pod(MWMS, "worker-0", "Failed", exit_code=1)], finished)
    assert written(later)["state"] == "Succeeded"
    assert written(later)["conditions"] == finished["conditions"]
    assert written(later)["completionTime"] == finished["completionTime"]
    assert later.create_pods == ()
    assert later.events == ()


def test_succeeded_replica_is_never_recreated() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2)}, "successPolicy": "AllWorkers"}
    status = settle(spec, [pod(spec, "worker-0"), pod(spec, "worker-1", "Succeeded", exit_code=0)])
    assert status["replicaStatuses"]["Worker"]["succeededIndexes"] == [1]
    plan = run(spec, [pod(spec, "worker-0")], status)
    assert plan.create_pods == ()


def test_suspend_deletes_children_and_resume_recreates_them() -> None:
    running = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    suspended_spec = {**MWMS, "runPolicy": {"suspend": True}}
    plan = run(suspended_spec, [pod(MWMS, k) for k in ALL_MWMS], running)
    assert written(plan)["state"] == "Suspended"
    assert deleted(plan) == [f"mnist-{k}" for k in ALL_MWMS]
    assert len(plan.delete_services) == 3
    assert [e.reason for e in plan.events] == ["TFJobSuspended"]
    later = NOW + timedelta(minutes=5)
    resumed = decide_observing(job_view(MWMS, plan.status), [], [], later)
    assert created(resumed) == [f"mnist-{k}" for k in ALL_MWMS]
    assert condition(written(resumed), "Suspended")["status"] == "False"
    assert written(resumed)["startTime"] == "2026-11-22T12:05:00Z"


def test_a_job_queued_in_kueue_says_so_while_suspended() -> None:
    """Kueue's own Kubeflow integration: its webhook suspended the job and its controller made
    the Workload (test_queueing.py: the operator's route)."""
    kubeflow = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    spec = {**MWMS, "runPolicy": {"suspend": True}}
    queued = JobView(kubeflow, "1", 1, False, spec, {}, "", "team")
    kueues = WorkloadObservation("tfjob-mnist-1a2b3", "w-uid", "1", 1, JOB.uid, None)
    held = condition(written(decide_observing(queued, [], [], NOW, None, [kueues])), "Suspended")
    assert held["reason"] == "TFJobSuspended"
    assert held["message"] == (
        "TFJob ml/mnist is suspended: queued in Kueue's LocalQueue team until it is admitted."
    )


def test_changed_replica_count_recreates_pods_without_counting_a_restart() -> None:
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    grown = {"tfReplicaSpecs": {**MWMS["tfReplicaSpecs"], "Worker": replica_spec(3, "ExitCode")}}
    plan = decide_observing(
        job_view(grown, status), [pod(MWMS, k) for k in ALL_MWMS], services(MWMS), NOW
    )
    assert deleted(plan) == [f"mnist-{k}" for k in ALL_MWMS]
    assert plan.create_pods == (), "new pods wait for the old cluster to be gone"
    assert written(plan)["restartCount"] == 0
    assert condition(written(plan), "Restarting")["reason"] == "ReplicasChanged"
    assert "mnist-worker-2" in [s.name for s in plan.create_services]
    back = run(grown, [], plan.status)
    assert created(back) == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]


def test_scale_down_deletes_extra_replicas() -> None:
    status = settle(MWMS, [pod(MWMS, k) for k in ALL_MWMS])
    shrunk = {"tfReplicaSpecs": {**MWMS["tfReplicaSpecs"], "Worker": replica_spec(1, "ExitCode")}}
    plan = decide_observing(
        job_view(shrunk, status), [pod(MWMS, k) for k in ALL_MWMS], services(MWMS), NOW
    )
    assert "mnist-worker-1" in deleted(plan)
    assert "mnist-worker-1" in [d.name for d in plan.delete_services]


def test_evaluator_finishes_its_final_evaluation_before_success() -> None:
    spec = {**PSS, "tfReplicaSpecs": {**PSS["tfReplicaSpecs"], "Evaluator": replica_spec(1)}}
    keys = (*ALL_PSS, "evaluator-0")
    status = settle(spec, [pod(spec, k) for k in keys])
    pods = [pod(spec, "chief-0", "Succeeded", exit_code=0)] + [pod(spec, k) for k in keys[1:]]
    plan = run(spec, pods, status)
    assert written(plan)["state"] == "Running"
    assert condition(written(plan), "Running")["reason"] == "TrainingFinished"
    assert deleted(plan) == ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    done = [
        pod(spec, "chief-0", "Succeeded", exit_code=0),
        pod(spec, "evaluator-0", "Succeeded", exit_code=0),
    ]
    assert written(run(spec, done, plan.status))["state"] == "Succeeded"


def test_pods_of_an_earlier_job_with_the_same_name_block_creation() -> None:
    old = JobRef("ml", "mnist", "uid-old")
    leftovers = [pod(MWMS, "worker-0", terminating=True, owner=old)]
    plan = decide_observing(job_view(MWMS), leftovers, [], NOW)
    assert created(plan) == ["mnist-chief-0", "mnist-worker-1"]
    assert plan.delete_pods == ()


def test_unschedulable_pod_is_reported_once() -> None:
    unschedulable = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            }
        ]
    }
    pods = [
        pod(MWMS, "chief-0"),
        pod(MWMS, "worker-0"),
        pod(MWMS, "worker-1", "Pending", status=unschedulable),
    ]
    plan = run(MWMS, pods, settle(MWMS, []))
    running = condition(written(plan), "Running")
    assert running["status"] == "False"
    assert running["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in running["message"]
    assert [e.reason for e in plan.events] == ["Unschedulable"]
    assert run(MWMS, pods, plan.status).events == ()
    # Another pod becomes unschedulable first in the report: the message moves, no new event.
    more = [pod(MWMS, "chief-0", "Pending", status=unschedulable), *pods[1:]]
    again = run(MWMS, more, plan.status)
    assert "chief-0 is pending" in condition(written(again), "Running")["message"]
    assert again.events == ()


def test_deleting_job_is_left_to_the_garbage_collector() -> None:
    plan = decide_observing(
        job_view(MWMS, deleting=True), [pod(MWMS, "chief-0", terminating=True)], [], NOW
    )
    assert plan == Plan()


def test_invalid_spec_fails_with_the_reason() -> None:
    spec = {"tfReplicaSpecs": {"PS": replica_spec(1)}}
    plan = decide_observing(job_view(spec), [], [], NOW)
    failed = condition(written(plan), "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "PS needs Worker" in failed["message"]
    assert plan.create_pods == ()


def crash_looping(restarts: int = 1) -> dict[str, Any]:
    """The kubelet's status of a pod whose TensorFlow container crashed and waits to restart."""
    waiting = {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}
    return {
        "containerStatuses": [
            {"name": "tensorflow", "restartCount": restarts, "state": {"waiting": waiting}}
        ]
    }


def test_a_crash_looping_replica_is_not_running_and_says_why() -> None:
    on_failure = {
        "tfReplicaSpecs": {
            "Chief": replica_spec(1, "OnFailure"),
            "Worker": replica_spec(2, "OnFailure"),
        }
    }
    running = [pod(on_failure, key) for key in ("chief-0", "worker-0", "worker-1")]
    status = settle(on_failure, running)
    assert condition(status, "Running")["status"] == "True"
    # The kubelet keeps the phase Running while the container waits to be restarted.
    looping = [*running[:2], pod(on_failure, "worker-1", status=crash_looping())]
    plan = run(on_failure, looping, status)
    assert plan.status is not None
    reported = condition(written(plan), "Running")
    assert (reported["status"], reported["reason"]) == ("False", "CrashLoopBackOff")
    assert reported["message"] == (
        "worker-1 is waiting: CrashLoopBackOff: back-off 10s restarting failed container"
    )
    assert [(e.reason, e.series) for e in plan.events] == [("CrashLoopBackOff", "worker-1")]
    # Running again once it runs.
    again = run(on_failure, running, plan.status)
    assert again.status is not None
    assert condition(written(again), "Running")["status"] == "True"


def test_a_reason_that_goes_away_leaves_the_job_starting_not_stuck_on_it() -> None:
    pull = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    waiting = {"containerStatuses": [{"name": "tensorflow", "state": {"waiting": pull}}]}
    pods = [pod(MWMS, "chief-0", "Pending", status=waiting), pod(MWMS, "worker-0")]
    pods.append(pod(MWMS, "worker-1"))
    status = settle(MWMS, pods)
    assert condition(status, "Running")["reason"] == "ImagePullBackOff"
    creating = [pod(MWMS, "chief-0", "Pending"), *pods[1:]]
    plan = run(MWMS, creating, status)
    assert plan.status is not None
    reported = condition(written(plan), "Running")
    assert (reported["status"], reported["reason"]) == ("False", "ReplicasStarting")
    assert plan.events == ()


def refusal(status: int, replica: str = "worker-1", since: datetime = NOW) -> Refusal:
    reason = "Invalid" if status == 422 else "Forbidden"
    return Refusal("pod", replica, status, reason, "spec.volumes: not found", 1, since, 1)


def test_a_refused_pod_is_the_running_condition_and_an_invalid_one_fails_after_grace() -> None:
    pods = [pod(MWMS, "chief-0"), pod(MWMS, "worker-0")]
    plan = run(MWMS, pods, refusals=[refusal(422)], invalid_grace_seconds=30)
    assert plan.status is not None
    reported = condition(written(plan), "Running")
    assert (reported["status"], reported["reason"]) == ("False", "FailedCreatePod")
    assert reported["message"] == (
        "worker-1: the API server refused its pod (422 Invalid): spec.volumes: not found; the "
        "TFJob fails at 2026-11-22T12:00:30Z unless its spec is changed"
    )
    assert plan.requeue_after == pytest.approx(30)
    assert plan.events == ()  # the controller records each refusal itself
    assert created(plan) == ["mnist-worker-1"]  # tried again (the controller holds it back)

    later = NOW + timedelta(seconds=30)
    failed = run(MWMS, pods, plan.status, refusals=[refusal(422)], now=later)
    assert failed.status is not None
    outcome = condition(written(failed), "Failed")
    assert (outcome["status"], outcome["reason"]) == ("True", "FailedCreatePod")
    assert outcome["message"].endswith("it was still refused after 30s")
    assert created(failed) == []


def test_the_grace_counts_from_the_refusal_the_status_records_so_a_restart_keeps_it() -> None:
    pods = [pod(MWMS, "chief-0"), pod(MWMS, "worker-0")]
    first = run(MWMS, pods, refusals=[refusal(422)], invalid_grace_seconds=30)
    assert first.status is not None
    recorded = condition(written(first), "Running")
    assert recorded["lastTransitionTime"] == "2026-11-22T12:00:00Z"  # the refusal's start
    # Another operator (a restart, a takeover) sees the refusal for the first time 20 s on.
    restart = NOW + timedelta(seconds=20)
    seen_again = refusal(422, since=restart)
    kept = run(MWMS, pods, first.status, refusals=[seen_again], now=restart)
    assert kept.status is None  # the status already says it all: the same deadline
    assert kept.requeue_after == pytest.approx(10)
    failed = run(MWMS, pods, first.status, refusals=[seen_again], now=NOW + timedelta(seconds=30))
    assert failed.status is not None
    assert condition(written(failed), "Failed")["reason"] == "FailedCreatePod"
    # A status of another generation of the spec (an edit) says nothing of this refusal.
    edited = {**first.status, "observedGeneration": 0}
    fresh = run(MWMS, pods, edited, refusals=[seen_again], now=restart)
    assert fresh.status is not None
    restarted = condition(written(fresh), "Running")
    assert restarted["lastTransitionTime"] == "2026-11-22T12:00:20Z"
    assert "fails at 2026-11-22T12:00:50Z" in restarted["message"]


def test_a_refusal_after_another_waiting_reason_starts_the_condition_anew() -> None:
    """Running was already False (a pod pulling its image): the refusal still marks when
    it began, since its grace counts from there."""
    pull = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    waiting = {"containerStatuses": [{"name": "tensorflow", "state": {"waiting": pull}}]}
    pods = [pod(MWMS, "chief-0", "Pending", status=waiting), pod(MWMS, "worker-0")]
    status = settle(MWMS, pods)
    assert condition(status, "Running")["lastTransitionTime"] == "2026-11-22T12:00:00Z"
    later = NOW + timedelta(minutes=5)
    plan = run(MWMS, pods, status, refusals=[refusal(422, since=later)], now=later)
    assert plan.status is not None
    reported = condition(written(plan), "Running")
    assert (reported["reason"], reported["lastTransitionTime"]) == (
        "FailedCreatePod",
        "2026-11-22T12:05:00Z",
    )


def test_a_forbidden_pod_waits_and_a_changed_spec_makes_a_refusal_moot() -> None:
    pods = [pod(MWMS, "chief-0"), pod(MWMS, "worker-0")]
    much_later = NOW + timedelta(hours=1)
    plan = run(MWMS, pods, refusals=[refusal(403, since=NOW)], now=much_later)
    assert plan.status is not None
    assert condition(written(plan), "Running")["reason"] == "FailedCreatePod"
    assert "Failed" not in {c["type"] for c in written(plan)["conditions"]}
    # A refusal of an older generation of the spec is not the job's state any more.
    older = Refusal("pod", "worker-1", 422, "Invalid", "bad", 0, NOW, 1)
    moot = run(MWMS, pods, refusals=[older], now=much_later)
    assert moot.status is not None
    assert "Failed" not in {c["type"] for c in written(moot)["conditions"]}
    assert created(moot) == ["mnist-worker-1"]


def test_a_gang_larger_than_the_job_waits_saying_why_until_lowered() -> None:
    """kubeflow.org accepts it, as Kubeflow does; tfjob.dev's CRD refuses it at apply."""
    volcano = {"schedulerName": "volcano"}
    worker = replica_spec(1, "Never")
    worker["template"]["spec"].update(volcano)
    spec = {
        "tfReplicaSpecs": {"Worker": worker},
        "runPolicy": {"schedulingPolicy": {"minAvailable": 10}},
    }
    plan = decide_observing(job_view(spec), [], [], NOW)
    group = pod_group_writes(plan).create
    assert group is not None
    assert group["spec"]["minMember"] == 10
    assert group["spec"]["queue"] == "default"  # Volcano's, as Kubeflow sets
    assert plan.status is not None
    reported = condition(written(plan), "Running")
    assert (reported["status"], reported["reason"]) == ("False", "GangUnschedulable")
    assert "minAvailable is 10, more than the job's 1 replicas" in reported["message"]
    assert "Failed" not in {c["type"] for c in written(plan)["conditions"]}
    assert [e.reason for e in plan.events] == ["GangUnschedulable"]
    # The pod waits for its gang: said once, and the job is not failed.
    pending = [pod(spec, "worker-0", "Pending")]
    assert run(spec, pending, plan.status).events == ()


def test_a_tf_config_too_long_for_the_environment_fails_the_job_before_any_pod() -> None:
    """At the replica bound, names at their limits make TF_CONFIG longer than Linux lets an
    environment variable be: no pod could start, so none is created."""
    name = "j" * (MAX_CHILD_NAME - len("-worker-999"))
    job = JobView(JobRef("n" * 63, name, "uid-1"), "1", 1, False, BOUND, {})
    plan = decide_observing(job, [], [], NOW, "cluster.local")
    assert (plan.create_pods, plan.create_services) == ((), ())
    failed = condition(written(plan), "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "more than the 131072 bytes Linux allows one environment variable" in failed["message"]
    assert "Use fewer replicas, or a shorter job name or namespace" in failed["message"]


def test_a_job_at_the_replica_bound_with_usual_names_renders_its_pods_a_batch_at_a_time() -> None:
    plan = decide_observing(job_view(BOUND), [], [], NOW, "cluster.local")
    assert len(plan.create_pods) == MAX_REPLICAS
    assert "Failed" not in {c["type"] for c in written(plan)["conditions"]}
    pod = plan.create_pods[-1].render()
    (config,) = [
        e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"
    ]
    assert len(config) < MAX_ENVIRONMENT_STRING / 2
    assert len(json.loads(config)["cluster"]["worker"]) == MAX_REPLICAS
