"""TFJobs under Kueue's MultiKueue (integrations/kueue.py, decide/flow.py): on the manager
cluster a job whose managedBy names MultiKueue gets its Workload and nothing else; on a
worker, the copy MultiKueue creates adopts the Workload MultiKueue made for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from support.builders import JOB, NOW, decide_observing, replica_spec, workload_writes

from tfjob_operator.api import KUBEFLOW, MULTIKUEUE, JobRef
from tfjob_operator.client import report
from tfjob_operator.client.views import Dispatch as ClientDispatch
from tfjob_operator.client.views import TFJob
from tfjob_operator.integrations.kueue import Dispatch, Kueue, dispatch_events
from tfjob_operator.job_view import JobView
from tfjob_operator.observe import FlavorObservation, WorkloadObservation, observe_workload

from .test_kubeflow_api import body
from .test_queueing import workload

SPEC = {"tfReplicaSpecs": {"Worker": replica_spec(2, resources={"requests": {"cpu": "1"}})}}
MANAGER_SPEC = {**SPEC, "managedBy": MULTIKUEUE}
PREBUILT = "tfjob-mnist-0a1b2"


def job_body(
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    ref: JobRef = JOB,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    made = body(ref, "")
    made["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team", **(labels or {})}
    made["metadata"]["annotations"] = annotations or {}
    made["spec"] = spec
    return made


def view(
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    ref: JobRef = JOB,
    annotations: dict[str, str] | None = None,
) -> JobView:
    return JobView.from_body(job_body(spec, labels, ref, annotations), ref.api)


def manager_workload(
    cluster: str | None = None,
    checks: tuple[tuple[str, str, str], ...] = (),
    conditions: dict[str, tuple[str, str]] | None = None,
) -> WorkloadObservation:
    """The job's Workload on the manager, made by the operator: dispatched to `cluster`,
    with MultiKueue's and other `checks` (name, state, message)."""
    more: dict[str, Any] = {
        "admissionChecks": [{"name": n, "state": s, "message": m} for n, s, m in checks]
    }
    if cluster:
        more["clusterName"] = cluster
    return workload(
        {t: (v, r, r) for t, (v, r) in (conditions or {}).items()},
        counts={"worker": 2},
        more_status=more,
    )


def test_a_dispatched_job_gets_its_workload_and_nothing_else() -> None:
    job = view(MANAGER_SPEC)
    assert job.managed_by == MULTIKUEUE
    plan = decide_observing(job, [], [], NOW)
    assert plan.status is None, "MultiKueue copies the worker's status: none is written"
    assert (plan.create_pods, plan.create_services) == ((), ())
    body = workload_writes(plan).create
    assert body is not None
    assert body["spec"]["queueName"] == "team"
    assert body["metadata"]["ownerReferences"][0]["uid"] == JOB.uid


def test_kubeflows_run_policy_field_is_mirrored_before_the_workload_is_made() -> None:
    """MultiKueue's generic adapter reads spec.managedBy: a Kubeflow job that says
    runPolicy.managedBy gets it first, and its Workload only after."""
    ref = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    job = view({**SPEC, "runPolicy": {"managedBy": MULTIKUEUE}}, ref=ref)
    assert job.managed_by == MULTIKUEUE
    writes = workload_writes(decide_observing(job, [], [], NOW))
    assert (writes.managed_by, writes.create) == (MULTIKUEUE, None)
    both = {**SPEC, "managedBy": MULTIKUEUE, "runPolicy": {"managedBy": MULTIKUEUE}}
    mirrored = view(both, ref=ref)
    writes = workload_writes(decide_observing(mirrored, [], [], NOW))
    assert writes.managed_by is None
    assert writes.create is not None


def test_a_job_on_kueues_own_route_is_kueues() -> None:
    """Where Kueue's Kubeflow integration is on, its webhook suspends the job at creation
    and Kueue makes the Workload (and dispatches with its own adapter): the operator writes
    nothing, and makes no second Workload."""
    ref = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    suspended = {**SPEC, "runPolicy": {"managedBy": MULTIKUEUE, "suspend": True}}
    plan = decide_observing(view(suspended, ref=ref), [], [], NOW)
    assert (plan.status, plan.integration_writes, plan.events) == (None, (), ())
    kueues = observe_workload(
        {
            "metadata": {
                "name": "tfjob-mnist-kueue",
                "uid": "kueue-wl",
                "ownerReferences": [{"kind": "TFJob", "uid": JOB.uid, "controller": True}],
            },
            "spec": {"podSets": [{"name": "worker", "count": 2}]},
        }
    )
    running = {**SPEC, "runPolicy": {"managedBy": MULTIKUEUE}}
    plan = decide_observing(view(running, ref=ref), [], [], NOW, None, [kueues])
    assert (plan.status, plan.integration_writes, plan.events) == (None, (), ())


def test_a_dispatched_job_without_a_queue_says_nothing_runs_it() -> None:
    body = job_body(MANAGER_SPEC)
    del body["metadata"]["labels"]
    plan = decide_observing(JobView.from_body(body), [], [], NOW)
    assert plan.status is None
    assert [e.reason for e in plan.events] == ["NotQueued"]
    assert "nothing runs it" in plan.events[0].message


def test_where_multikueue_runs_the_job_is_an_event_of_each_change() -> None:
    admitted = {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted")}
    first = manager_workload("worker-a", (("mk", "Ready", "dispatched"),), admitted)
    plan = decide_observing(view(MANAGER_SPEC), [], [], NOW, None, [first])
    assert plan.status is None
    assert [e.reason for e in plan.events] == ["Dispatched"]
    assert "worker cluster worker-a" in plan.events[0].message
    assert workload_writes(plan).dispatch == Dispatch.of(first)

    # Reported already: nothing new.
    assert dispatch_events(Dispatch.of(first), Dispatch.of(first), "w") == ()
    lost = manager_workload("worker-a", (("mk", "Retry", "Admitting remote lost"),))
    retried = dispatch_events(Dispatch.of(first), Dispatch.of(lost), "w")
    assert [(e.type, e.reason) for e in retried] == [("Warning", "DispatchRetried")]
    assert "Admitting remote lost" in retried[0].message
    # Taken back, it waits with no worker cluster, and is dispatched again elsewhere.
    reported = Dispatch.of(lost, Dispatch.of(first))
    waiting = Dispatch.of(manager_workload(None, (("mk", "Pending", ""),)), reported)
    assert (waiting.cluster, waiting.last) == (None, "worker-a")
    assert dispatch_events(reported, waiting, "w") == ()
    again = Dispatch.of(manager_workload("worker-b", (("mk", "Ready", "dispatched"),)), waiting)
    moved = dispatch_events(waiting, again, "w")
    assert [e.reason for e in moved] == ["Dispatched"]
    assert "worker cluster worker-b" in moved[0].message
    assert "after worker cluster worker-a" in moved[0].message


def test_a_workload_admitted_without_a_check_is_said_never_to_run() -> None:
    """Kueue admits a Workload that requests none of its ClusterQueue's resources with no
    flavor, so with none of the ClusterQueue's admission checks: MultiKueue never sees it."""
    admitted = {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted")}
    unchecked = manager_workload(None, (), admitted)
    plan = decide_observing(view(MANAGER_SPEC), [], [], NOW, None, [unchecked])
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "NotDispatched")]
    assert "requests none of the resources" in plan.events[0].message


class RecordedReads:
    """Kueue's reads, recorded; every ResourceFlavor exists."""

    def __init__(self) -> None:
        self.flavors: list[str] = []

    async def read_resource_flavor(self, name: str) -> FlavorObservation:
        self.flavors.append(name)
        return FlavorObservation({}, ())


def test_the_manager_reads_no_flavor_for_a_dispatched_job() -> None:
    """A dispatched job's pods are placed on its worker: its admission's flavors are read
    there, not on the manager. The same Workload of a job run here has them read."""
    admitted = workload(
        {"QuotaReserved": ("True", "r", "m"), "Admitted": ("True", "r", "m")},
        counts={"worker": 2},
        flavor="a100",
    )
    for spec, read in ((MANAGER_SPEC, []), (SPEC, ["a100"])):
        reads = RecordedReads()
        asyncio.run(Kueue().observe(view(spec), [admitted], reads, 0.0))
        assert reads.flavors == read


def test_an_evicted_dispatch_gives_its_quota_back_at_once() -> None:
    """No pod of a dispatched job runs here: once Kueue evicts its Workload (a worker lost
    past MultiKueue's timeout), the quota goes back and Kueue dispatches it again."""
    evicted = manager_workload(
        "worker-a",
        (("mk", "Retry", "Admitting remote lost"),),
        {
            "QuotaReserved": ("True", "QuotaReserved"),
            "Admitted": ("True", "Admitted"),
            "Evicted": ("True", "AdmissionCheck"),
        },
    )
    release = workload_writes(decide_observing(view(MANAGER_SPEC), [], [], NOW, None, [evicted]))
    assert release.patch_status is not None
    conditions = {c["type"]: c for c in release.patch_status[1]["status"]["conditions"]}
    assert conditions["QuotaReserved"]["status"] == "False"
    assert conditions["Requeued"]["reason"] == "AdmissionCheck"


def prebuilt_workload(owned: bool = False) -> WorkloadObservation:
    """The Workload MultiKueue made on a worker: a copy of the manager's, without the
    job-uid label and owner (MultiKueue drops them), with its origin label."""
    metadata: dict[str, Any] = {
        "name": PREBUILT,
        "uid": "remote-wl",
        "resourceVersion": "11",
        "generation": 1,
        "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"},
    }
    if owned:
        metadata["ownerReferences"] = [{"kind": "TFJob", "uid": JOB.uid, "controller": True}]
    return observe_workload(
        {"metadata": metadata, "spec": {"podSets": [{"name": "worker", "count": 2}]}}
    )


ORIGIN = {"kueue.x-k8s.io/multikueue-origin": "multikueue"}
#: Kueue v0.19 names the Workload in an annotation; earlier releases in a label.
NAMED = {"kueue.x-k8s.io/prebuilt-workload-name": PREBUILT}


def test_the_copy_on_a_worker_adopts_the_workload_multikueue_made() -> None:
    """MultiKueue drops spec.managedBy from its copy: the worker runs it, with the
    Workload MultiKueue made, which the operator adopts and never makes itself."""
    ref = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    copy = view({**SPEC, "runPolicy": {"managedBy": MULTIKUEUE}}, ORIGIN, ref, NAMED)
    assert copy.managed_by is None
    assert copy.prebuilt_workload == PREBUILT
    assert view(SPEC, {**ORIGIN, **NAMED}, ref).prebuilt_workload == PREBUILT

    waiting = decide_observing(copy, [], [], NOW)
    assert workload_writes(waiting).create is None
    assert waiting.create_pods == ()
    assert waiting.status is not None
    held = next(c for c in waiting.status["conditions"] if c["type"] == "Suspended")
    assert f"its Workload {PREBUILT}, which MultiKueue makes, does not exist" in held["message"]

    adopting = decide_observing(copy, [], [], NOW, readable_workloads=[prebuilt_workload()])
    writes = workload_writes(adopting)
    assert writes.create is None
    assert writes.adopt is not None
    target, patch = writes.adopt
    assert target.name == PREBUILT
    assert patch["metadata"]["resourceVersion"] == "11"
    assert patch["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert patch["metadata"]["ownerReferences"][0]["controller"] is True
    assert patch["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == JOB.uid
    assert patch["metadata"]["labels"]["tfjob.dev/controller-uid"] == JOB.uid


def test_the_client_says_on_which_worker_a_dispatched_job_runs() -> None:
    body = job_body(MANAGER_SPEC)
    body["metadata"]["creationTimestamp"] = "2026-11-22T11:59:00Z"
    job = TFJob(body)
    assert job.managed_by == MULTIKUEUE
    workload = {
        "metadata": {"name": "tfjob-mnist-0a1b2", "uid": "wl"},
        "status": {
            "clusterName": "worker-b",
            "admissionChecks": [{"name": "mk", "state": "Ready", "message": "dispatched"}],
        },
    }
    dispatch = ClientDispatch.of(MULTIKUEUE, workload)
    assert dispatch.where == "worker cluster worker-b (MultiKueue)"
    assert "pass its kubeconfig" in dispatch.elsewhere
    text = report.describe(job, [], [], {}, NOW, dispatch)
    assert "Runs on:    worker cluster worker-b (MultiKueue)" in text
    assert "check mk: Ready: dispatched" in text
    table = report.table([job], NOW, dispatches={JOB.uid: dispatch})
    assert table.splitlines()[0].split()[-1] == "CLUSTER"
    assert table.splitlines()[1].split()[-1] == "worker-b"
    waiting = ClientDispatch.of(MULTIKUEUE, None)
    assert waiting.cluster is None
    assert "no pods in this cluster" in waiting.elsewhere
