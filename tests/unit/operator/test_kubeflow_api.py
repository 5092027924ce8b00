"""The TFJob under kubeflow.org/v1: the same decisions, with what Kubeflow's clients read
(labels, owner, selector, events), jobs of other controllers skipped, and two jobs of one
name in the two groups kept apart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.builders import NOW, decide_observing, replica_of, replica_spec

from tfjob_operator.api import KUBEFLOW, TFJOB_DEV, JobRef, api_of, manager_of
from tfjob_operator.controller import Caches, Controller
from tfjob_operator.decide import decide_name_taken, name_order
from tfjob_operator.events import WARNING, Event, event_object
from tfjob_operator.integrations.kueue import read_workload
from tfjob_operator.job_view import JobView
from tfjob_operator.metrics import Metrics
from tfjob_operator.observe import WorkloadObservation, observe_workload
from tfjob_operator.operator_main import job_reader
from tfjob_operator.render import render_pod, render_service
from tfjob_operator.spec import parse_spec
from tfjob_operator.watchcache import Store

from .test_controller import FakeClock, FakeWrites

KUBEFLOW_JOB = JobRef("ml", "mnist", "uid-kf", KUBEFLOW)
SPEC = {"tfReplicaSpecs": {"PS": replica_spec(1), "Worker": replica_spec(2)}}


def body(ref: JobRef, created: str, **run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": ref.api.api_version,
        "kind": "TFJob",
        "metadata": {
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {**SPEC, "runPolicy": run_policy},
    }


def test_api_versions_name_their_api() -> None:
    assert api_of("kubeflow.org/v1") is KUBEFLOW
    assert api_of("tfjob.dev/v1") is TFJOB_DEV
    assert api_of("kubeflow.org/v2") is None
    assert KUBEFLOW.path == "/apis/kubeflow.org/v1"
    assert KUBEFLOW.crd_name == "tfjobs.kubeflow.org"


@pytest.mark.parametrize(
    ("managed_by", "manager"),
    [
        (None, None),
        ("tfjob.dev/tfjob-operator", None),
        ("kubeflow.org/training-operator", "kubeflow.org/training-operator"),
        ("kueue.x-k8s.io/multikueue", "kueue.x-k8s.io/multikueue"),
    ],
)
def test_the_operator_reads_its_own_jobs_and_multikueues(
    managed_by: str | None, manager: str | None
) -> None:
    """Its own jobs are decided; MultiKueue's are read too (their Workload is the
    operator's to make, their pods are not); another operator's are skipped."""
    run_policy = {} if managed_by is None else {"managedBy": managed_by}
    job_body = body(KUBEFLOW_JOB, "2026-11-22T12:00:00Z", **run_policy)
    assert manager_of(job_body) == manager
    read = job_reader(KUBEFLOW)(job_body)
    if manager == "kubeflow.org/training-operator":
        assert read is None
        return
    assert read is not None
    uid, key, job = read
    assert (uid, key) == ("uid-kf", ("ml", "mnist"))
    assert job.ref == KUBEFLOW_JOB
    assert job.created == "2026-11-22T12:00:00Z"
    assert job.managed_by == manager


def test_spec_managed_by_names_the_manager_and_multikueues_copy_is_ours() -> None:
    """spec.managedBy (the field Kueue's MultiKueue adapter reads) says the same as
    Kubeflow's runPolicy field; the copy MultiKueue makes on a worker, which keeps the
    runPolicy field but carries MultiKueue's origin label, is this operator's to run."""
    job_body = body(KUBEFLOW_JOB, "2026-11-22T12:00:00Z")
    job_body["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert manager_of(job_body) == "kueue.x-k8s.io/multikueue"
    copy = body(KUBEFLOW_JOB, "2026-11-22T12:00:00Z", managedBy="kueue.x-k8s.io/multikueue")
    copy["metadata"]["labels"] = {
        "kueue.x-k8s.io/multikueue-origin": "manager",
        "kueue.x-k8s.io/prebuilt-workload-name": "tfjob-mnist-abcde",
    }
    assert manager_of(copy) is None
    view = JobView.from_body(copy, KUBEFLOW)
    assert view.managed_by is None
    assert view.prebuilt_workload == "tfjob-mnist-abcde"
    # Another controller's job carrying the label stays that controller's.
    other = body(KUBEFLOW_JOB, "", managedBy="kubeflow.org/training-operator")
    other["metadata"]["labels"] = {"kueue.x-k8s.io/multikueue-origin": "manager"}
    assert manager_of(other) == "kubeflow.org/training-operator"


def test_children_carry_kubeflows_labels_and_a_kubeflow_owner() -> None:
    spec = parse_spec("mnist", SPEC)
    for key, role in (("worker-0", "master"), ("worker-1", None), ("ps-0", None)):
        pod = render_pod(KUBEFLOW_JOB, spec, replica_of(key), generation=0)
        service = render_service(KUBEFLOW_JOB, spec, replica_of(key))
        replica_type, index = key.split("-")
        for child in (pod, service):
            labels = child["metadata"]["labels"]
            assert labels["training.kubeflow.org/operator-name"] == "tfjob-controller"
            assert labels["training.kubeflow.org/job-name"] == "mnist"
            assert labels["training.kubeflow.org/replica-type"] == replica_type
            assert labels["training.kubeflow.org/replica-index"] == index
            assert labels.get("training.kubeflow.org/job-role") == role
            # The operator's own labels stay: its watches and selectors use them.
            assert labels["tfjob.dev/job-name"] == "mnist"
            (owner,) = child["metadata"]["ownerReferences"]
            assert (owner["apiVersion"], owner["uid"]) == ("kubeflow.org/v1", "uid-kf")
        # The Service selects its pod by the operator's labels, under both APIs.
        assert set(service["spec"]["selector"]) == {
            "tfjob.dev/job-name",
            "tfjob.dev/replica-type",
            "tfjob.dev/replica-index",
        }


def test_tfjob_dev_children_carry_no_kubeflow_label() -> None:
    spec = parse_spec("mnist", SPEC)
    labels = render_pod(JobRef("ml", "mnist", "uid-1"), spec, replica_of("worker-0"), 0)[
        "metadata"
    ]["labels"]
    assert not [k for k in labels if k.startswith("training.kubeflow.org/")]


def test_status_selects_replicas_by_kubeflows_labels() -> None:
    job = JobView.from_body(body(KUBEFLOW_JOB, "2026-11-22T12:00:00Z"), KUBEFLOW)
    plan = decide_observing(job, [], [], NOW)
    assert plan.status is not None
    assert plan.status["replicaStatuses"]["Worker"]["selector"] == (
        "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=worker"
    )
    assert plan.status["conditions"][0]["reason"] == "TFJobCreated"


def test_events_name_the_kubeflow_object() -> None:
    event = event_object(KUBEFLOW_JOB, "7", Event(WARNING, "Why", "what"), NOW, "op")
    assert event["involvedObject"]["apiVersion"] == "kubeflow.org/v1"
    assert event["involvedObject"]["uid"] == "uid-kf"


def test_the_younger_of_two_jobs_of_one_name_fails_once_and_touches_nothing() -> None:
    holder = JobRef("ml", "mnist", "uid-1", TFJOB_DEV)
    job = JobView.from_body(body(KUBEFLOW_JOB, "2026-11-22T12:00:01Z"), KUBEFLOW)
    plan = decide_name_taken(job, holder, NOW)
    assert plan.status is not None
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "NameTaken")
    assert (
        "The tfjob.dev/v1 TFJob ml/mnist, created earlier, has the same name" in (failed["message"])
    )
    assert plan.status["completionTime"]
    assert [e.reason for e in plan.events] == ["NameTaken"]
    assert (plan.create_pods, plan.create_services, plan.delete_pods) == ((), (), ())

    written = JobView(job.ref, "2", 1, False, job.spec, plan.status, job.created)
    again = decide_name_taken(written, holder, NOW)
    assert again.status is None
    assert again.events == ()


def test_the_controller_runs_the_older_job_and_fails_the_younger() -> None:
    writes = FakeWrites()
    caches = Caches(jobs=Store(), pods=Store(), services=Store())
    controller = Controller(writes, caches, Metrics(), None, clock=FakeClock(), instance="test")
    older = JobRef("ml", "mnist", "uid-z", TFJOB_DEV)  # the larger uid: order is by time
    for ref, created, api in (
        (KUBEFLOW_JOB, "2026-11-22T12:00:05Z", KUBEFLOW),
        (older, "2026-11-22T12:00:00Z", TFJOB_DEV),
    ):
        caches.jobs.put(ref.uid, ("ml", "mnist"), JobView.from_body(body(ref, created), api))

    async def once() -> None:
        await controller.reconcile(("ml", "mnist"))
        await controller.stop()

    asyncio.run(once())
    failed = [(ref, patch) for ref, patch in writes.patched if ref == KUBEFLOW_JOB]
    assert len(failed) == 1
    assert failed[0][1]["state"] == "Failed"
    assert writes.decisions[0] is True
    owners = {b["metadata"]["ownerReferences"][0]["uid"] for b in writes.bodies.values()}
    assert owners == {"uid-z"}
    assert len(writes.bodies) == 6  # the older job's 3 pods and 3 services


def test_of_two_jobs_created_in_one_second_the_one_already_running_keeps_the_name() -> None:
    second = "2026-11-22T12:00:00Z"
    running = JobView.from_body(
        {
            **body(JobRef("ml", "mnist", "uid-z", TFJOB_DEV), second),
            "status": {"conditions": [{"type": "Created", "status": "True"}]},
        }
    )
    new = JobView.from_body(body(KUBEFLOW_JOB, second), KUBEFLOW)
    assert sorted([new, running], key=name_order)[0] is running

    refused = decide_name_taken(new, running.ref, NOW).status
    assert refused is not None
    new = JobView(new.ref, "2", 1, False, new.spec, refused, new.created)
    assert sorted([new, running], key=name_order)[0] is running
    fresh = JobView.from_body(body(JobRef("ml", "mnist", "uid-0", TFJOB_DEV), second))
    assert sorted([fresh, new], key=name_order)[0] is fresh


def workload(owner: JobRef, reserved: dict[str, str] | None) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", **reserved}] if reserved else []
    return {
        "metadata": {
            "namespace": owner.namespace,
            "name": f"tfjob-{owner.name}-1a2b3",
            "uid": "uid-wl",
            "ownerReferences": [
                {"kind": "TFJob", "name": owner.name, "uid": owner.uid, "controller": True}
            ],
        },
        "status": {"conditions": conditions},
    }


def test_a_workload_is_filed_under_its_tfjob_with_why_kueue_does_not_admit_it() -> None:
    refused = {"status": "False", "reason": "Inadmissible", "message": "LocalQueue q doesn't exist"}
    read = read_workload(workload(KUBEFLOW_JOB, refused))
    assert read is not None
    uid, key, observed = read
    assert (uid, key) == ("uid-wl", ("ml", "mnist"))
    assert observed.owner_uid == "uid-kf"
    assert observed.not_admitted == "LocalQueue q doesn't exist"
    admitted = observe_workload(workload(KUBEFLOW_JOB, {"status": "True", "message": "ok"}))
    assert admitted.not_admitted is None
    assert observe_workload(workload(KUBEFLOW_JOB, None)).not_admitted is None
    orphan = workload(KUBEFLOW_JOB, None)
    orphan["metadata"]["ownerReferences"][0]["kind"] = "Job"
    assert read_workload(orphan) is None


def test_a_suspended_queued_job_says_why_kueue_has_not_admitted_it() -> None:
    queued = body(KUBEFLOW_JOB, "2026-11-22T12:00:00Z", suspend=True)
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    job = JobView.from_body(queued, KUBEFLOW)
    refused = observe_workload(
        workload(KUBEFLOW_JOB, {"status": "False", "message": "insufficient quota for cpu"})
    )
    other = WorkloadObservation(
        "w", "w-uid", "1", 1, owner_uid="uid-other", not_admitted="not this one"
    )
    plan = decide_observing(job, [], [], NOW, None, [other, refused])
    assert plan.status is not None
    held = next(c for c in plan.status["conditions"] if c["type"] == "Suspended")
    assert held["message"] == (
        "TFJob ml/mnist is suspended: queued in Kueue's LocalQueue q until it is admitted. "
        "Kueue: insufficient quota for cpu"
    )
    # Kueue's reason changes: the message follows, the transition time stays.
    later = NOW.replace(minute=5)
    written = JobView(job.ref, "2", 1, False, job.spec, plan.status, job.created, job.queue)
    gone = WorkloadObservation(
        "w", "w-uid", "1", 1, owner_uid="uid-kf", not_admitted="LocalQueue q doesn't exist"
    )
    again = decide_observing(written, [], [], later, None, [gone])
    assert again.status is not None
    moved = next(c for c in again.status["conditions"] if c["type"] == "Suspended")
    assert moved["message"].endswith("Kueue: LocalQueue q doesn't exist")
    assert moved["lastTransitionTime"] == held["lastTransitionTime"]
    assert again.events == ()
