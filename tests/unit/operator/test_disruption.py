"""A job's PodDisruptionBudget (integrations/disruption.py): asked for by annotation, kept
while the job runs, gone once it has finished or is suspended; and the controller's writes
of it."""

from __future__ import annotations

from typing import Any

from support.builders import JOB, NOW, decide_observing, job_view, replica_spec

from tfjob_operator.integrations.disruption import (
    ANNOTATION,
    BudgetObservation,
    BudgetWrites,
    DisruptionBudget,
    observe_budget,
    render_budget,
)
from tfjob_operator.job_view import JobView
from tfjob_operator.spec import parse_spec

from .test_controller import KEY, Harness

SPEC: dict[str, Any] = {
    "tfReplicaSpecs": {"Worker": replica_spec(2, "ExitCode"), "Evaluator": replica_spec(1)}
}
FINISHED = {
    "conditions": [
        {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": ""},
        {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "done"},
    ],
    "completionTime": "2026-11-22T12:00:00Z",
}


def asking(
    spec: dict[str, Any] = SPEC, status: dict[str, Any] | None = None, version: str = "1"
) -> JobView:
    """The job, annotated to ask for a disruption budget, at resourceVersion `version`."""
    view = job_view(spec, status or {})
    return JobView(
        view.ref,
        version,
        view.generation,
        view.deleting,
        view.spec,
        view.status,
        annotations={ANNOTATION: "true"},
    )


def budget_writes(job: JobView, budgets: list[BudgetObservation]) -> BudgetWrites | None:
    plan = decide_observing(job, [], [], NOW, records={DisruptionBudget.name: budgets})
    writes = plan.writes_of(DisruptionBudget.name)
    assert writes is None or isinstance(writes, BudgetWrites)
    return writes


def observed(spec: dict[str, Any] = SPEC) -> BudgetObservation:
    body = render_budget(JOB, parse_spec(JOB.name, spec))
    return observe_budget({**body, "metadata": {**body["metadata"], "uid": "uid-pdb"}})


def test_a_running_job_that_asks_gets_a_budget_of_its_training_pods() -> None:
    writes = budget_writes(asking(), [])
    assert writes is not None
    assert writes.create is not None
    spec = writes.create["spec"]
    assert spec["minAvailable"] == 2, "the two workers; the evaluator trains nothing"
    assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow", "a pod not ready never blocks"
    assert spec["selector"]["matchLabels"] == {"tfjob.dev/controller-uid": JOB.uid}
    assert spec["selector"]["matchExpressions"] == [
        {"key": "tfjob.dev/replica-type", "operator": "NotIn", "values": ["evaluator"]}
    ]
    assert writes.create["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert budget_writes(asking(), [observed()]) is None, "one that exists is left alone"
    grown = {"tfReplicaSpecs": {**SPEC["tfReplicaSpecs"], "Worker": replica_spec(3, "ExitCode")}}
    changed = budget_writes(asking(grown), [observed()])
    assert changed is not None
    assert [why for _, why in changed.delete] == [
        "the replicas changed: it is made again for their number"
    ]
    again = budget_writes(asking(grown), [])
    assert again is not None
    assert again.create is not None
    assert again.create["spec"]["minAvailable"] == 3


def test_no_budget_unless_asked_and_none_left_once_finished_suspended_or_unasked() -> None:
    assert budget_writes(job_view(SPEC), []) is None
    suspended = {**SPEC, "runPolicy": {"suspend": True}}
    for job, why in (
        (asking(status=FINISHED), "the TFJob has finished"),
        (asking(suspended), "the TFJob is suspended"),
        (job_view(SPEC), "the TFJob no longer asks for one"),
    ):
        writes = budget_writes(job, [observed()])
        assert writes is not None
        assert (writes.create, [(b.name, w) for b, w in writes.delete]) == (
            None,
            [("mnist-training", why)],
        )


def test_the_controller_creates_the_budget_once_and_deletes_it_when_the_job_is_done() -> None:
    harness = Harness()
    harness.caches.jobs.put(JOB.uid, KEY, asking(version="1"))
    harness.reconcile()
    assert harness.calls("create poddisruptionbudget") == [
        ("create poddisruptionbudget", "mnist-training")
    ]
    harness.caches.jobs.put(JOB.uid, KEY, asking(version="2"))
    harness.reconcile()
    assert len(harness.calls("create poddisruptionbudget")) == 1, "not sent again meanwhile"
    harness.caches.integrations[DisruptionBudget.name].put("uid-pdb", KEY, observed())
    harness.caches.jobs.put(JOB.uid, KEY, asking(status=FINISHED, version="3"))
    harness.reconcile()
    assert harness.calls("delete poddisruptionbudgets") == [
        ("delete poddisruptionbudgets", "mnist-training")
    ]
    (event,) = [
        e for e in harness.writes.events if e["reason"] == "SuccessfulDeletePodDisruptionBudget"
    ]
    assert event["message"] == "Deleted PodDisruptionBudget mnist-training: the TFJob has finished"
