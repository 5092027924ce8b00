"""Kueue admission of tfjob.dev TFJobs (integrations/kueue.py): the operator as Kueue's job
controller.

Each test decides a job labelled with a LocalQueue against Workloads read the way the
watch reads them (observe_workload of a Workload body).
"""

from __future__ import annotations

from typing import Any

import pytest
from support.builders import JOB, NOW, decide_observing, pod, replica_spec, workload_writes

from tfjob_operator.api import KUBEFLOW, TFJOB_DEV, JobRef
from tfjob_operator.integrations.base import Gate, Passage
from tfjob_operator.integrations.kueue import (
    WorkloadWrites,
    admission,
    on_operators_route,
    topology_request,
    with_priority,
    workload_name,
)
from tfjob_operator.job_view import JobView
from tfjob_operator.observe import (
    FlavorObservation,
    WorkloadObservation,
    observe_flavor,
    observe_workload,
)
from tfjob_operator.plan import Plan
from tfjob_operator.spec import parse_spec

SPEC = {
    "tfReplicaSpecs": {
        "Chief": replica_spec(1),
        "Worker": replica_spec(2, resources={"requests": {"cpu": "1"}}),
    }
}
PODS = ("chief-0", "worker-0", "worker-1")
FLAVOR = FlavorObservation(
    node_labels={"pool": "a100"},
    tolerations=({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},),
)


def queued(
    status: dict[str, Any] | None = None, spec: dict[str, Any] = SPEC, ref: JobRef = JOB
) -> JobView:
    return JobView(ref, "1", 1, False, spec, status or {}, "2026-11-22T12:00:00Z", "team")


def workload(
    conditions: dict[str, tuple[str, str, str]] | None = None,
    *,
    counts: dict[str, int] | None = None,
    flavor: str | None = None,
    topology: bool = False,
    more_status: dict[str, Any] | None = None,
) -> WorkloadObservation:
    """A Workload of JOB with `conditions` (type: (status, reason, message)), admitted to
    `flavor` when given, with `more_status` in its status."""
    counts = counts or {"chief": 1, "worker": 2}
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-11-22T11:00:00Z",
            }
            for kind, (value, reason, message) in (conditions or {}).items()
        ],
        **(more_status or {}),
    }
    if flavor is not None:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": name,
                    "flavors": {"cpu": flavor},
                    "count": n,
                    **({"topologyAssignment": TOPOLOGY_ASSIGNMENT} if topology else {}),
                }
                for name, n in counts.items()
            ],
        }
    return observe_workload(
        {
            "metadata": {
                "name": workload_name(JOB),
                "uid": "wl-uid",
                "resourceVersion": "7",
                "generation": 1,
                "labels": {"tfjob.dev/controller-uid": JOB.uid},
                "ownerReferences": [{"kind": "TFJob", "uid": JOB.uid, "controller": True}],
            },
            "spec": {"podSets": [{"name": k, "count": n} for k, n in counts.items()]},
            "status": status,
        }
    )


#: Kueue's v1beta2 topology assignment: every pod on one node.
TOPOLOGY_ASSIGNMENT = {
    "levels": ["kubernetes.io/hostname"],
    "slices": [
        {
            "domainCount": 1,
            "valuesPerLevel": [{"universal": "node-1"}],
            "podCounts": {"universal": 1},
        }
    ],
}

ADMITTED = {
    "QuotaReserved": ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
    "Admitted": ("True", "Admitted", "The workload is admitted"),
}


def suspended(plan: Plan) -> dict[str, Any]:
    assert plan.status is not None
    return next(c for c in plan.status["conditions"] if c["type"] == "Suspended")


def test_a_queued_job_makes_its_workload_and_creates_no_pod() -> None:
    plan = decide_observing(queued(), [], [], NOW)
    body = workload_writes(plan).create
    assert body is not None
    assert body["metadata"]["name"] == workload_name(JOB)
    assert body["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert body["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == JOB.uid
    assert body["spec"]["queueName"] == "team"
    sets = {s["name"]: s for s in body["spec"]["podSets"]}
    assert {n: s["count"] for n, s in sets.items()} == {"chief": 1, "worker": 2}
    container = sets["worker"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "1"}}  # what Kueue counts
    assert plan.create_pods == ()
    assert suspended(plan)["message"] == (
        "TFJob ml/mnist is suspended: queued in Kueue's LocalQueue team until it is admitted."
    )


def test_kueues_gate_waits_with_kueues_reason_opens_with_placements_and_evicts() -> None:
    """queueing.admission as a gate (integrations/base.py), without the rest of the decision."""
    spec = parse_spec(JOB.name, SPEC)

    def gate(*workloads: WorkloadObservation, pods_exist: bool = False) -> Gate[WorkloadWrites]:
        return admission(
            JOB, spec, "team", None, workloads, {"a100": FLAVOR}, pods_exist=pods_exist, now="t"
        )

    first = gate()
    assert (first.passage, first.why) == (Passage.WAITING, None)
    assert first.writes.create is not None
    pending = gate(workload({"QuotaReserved": ("False", "Pending", "insufficient quota")}))
    assert (pending.passage, pending.why) == (Passage.WAITING, "insufficient quota")
    assert pending.writes == WorkloadWrites()

    admitted = gate(workload(ADMITTED, flavor="a100"))
    assert admitted.open
    worker: dict[str, Any] = {"metadata": {}, "spec": {}}
    admitted.dress(worker, list(spec.replicas())[-1])
    assert worker["spec"]["nodeSelector"] == {"pool": "a100"}
    assert worker["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "worker"}

    preempted = {**ADMITTED, "Evicted": ("True", "Preempted", "to make room")}
    stopping = gate(workload(preempted, flavor="a100"), pods_exist=True)
    assert (stopping.passage, stopping.why) == (Passage.EVICTED, "Preempted: to make room")
    assert stopping.writes.patch_status is None  # the quota stays until the pods are gone
    assert gate(workload(preempted, flavor="a100")).writes.patch_status is not None


def test_a_workload_name_is_the_jobs_own_and_never_the_next_ones() -> None:
    again = JobRef(JOB.namespace, JOB.name, "uid-2")
    assert workload_name(JOB) != workload_name(again)
    assert workload_name(JOB).startswith("tfjob-mnist-")


def test_while_kueue_has_not_admitted_it_the_job_says_why() -> None:
    refused = workload({"QuotaReserved": ("False", "Pending", "insufficient quota for cpu")})
    plan = decide_observing(queued(), [], [], NOW, None, [refused])
    assert workload_writes(plan).create is None
    assert plan.create_pods == ()
    assert suspended(plan)["message"].endswith("Kueue: insufficient quota for cpu")


def test_an_admitted_job_creates_its_pods_on_the_flavors_nodes() -> None:
    waiting = decide_observing(queued(), [], [], NOW).status
    admitted = workload(ADMITTED, flavor="a100")
    plan = decide_observing(
        queued(waiting), [], [], NOW, None, [admitted], flavors={"a100": FLAVOR}
    )
    assert sorted(p.name for p in plan.create_pods) == [f"mnist-{k}" for k in PODS]
    for created in (p.render() for p in plan.create_pods):
        assert created["spec"]["nodeSelector"] == {"pool": "a100"}
        assert created["spec"]["tolerations"] == list(FLAVOR.tolerations)
    resumed = suspended(plan)
    assert (resumed["status"], resumed["reason"]) == ("False", "TFJobResumed")


def test_pods_of_a_topology_assignment_wait_for_kueue_to_place_them() -> None:
    """Kueue's topology ungater finds the pods by their Workload and pod set, lifts the gate
    and adds the chosen domain's node labels."""
    admitted = workload(ADMITTED, flavor="a100", topology=True)
    plan = decide_observing(queued(), [], [], NOW, None, [admitted], flavors={"a100": FLAVOR})
    assert len(plan.create_pods) == 3
    for created in (p.render() for p in plan.create_pods):
        assert created["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
        assert created["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == workload_name(JOB)
        replica = created["metadata"]["labels"]["tfjob.dev/replica-type"]
        assert created["metadata"]["labels"]["kueue.x-k8s.io/podset"] == replica


def test_a_workloads_priority_class_is_kueues_choice_for_its_own_jobs() -> None:
    named = JobView(JOB, "1", 1, False, SPEC, {}, "", "team", priority_class="high")
    body = workload_writes(decide_observing(named, [], [], NOW)).create
    assert body is not None
    assert body["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    urgent = replica_spec(1)
    urgent["template"]["spec"]["priorityClassName"] = "urgent"
    pods_class = {"tfReplicaSpecs": {"Worker": urgent}}
    body = workload_writes(decide_observing(queued(spec=pods_class), [], [], NOW)).create
    assert body is not None
    assert body["spec"]["priorityClassRef"] == {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "urgent",
    }
    body = workload_writes(decide_observing(queued(), [], [], NOW)).create
    assert body is not None
    assert "priorityClassRef" not in body["spec"], "the cluster's default, read by the controller"
    valued = with_priority(body, (None, 0))
    assert valued["spec"]["priority"] == 0
    assert "priorityClassRef" not in valued["spec"]


@pytest.mark.parametrize(
    ("annotations", "request_"),
    [
        ({}, {}),
        ({"kueue.x-k8s.io/podset-required-topology": "rack"}, {"required": "rack"}),
        ({"kueue.x-k8s.io/podset-preferred-topology": "block"}, {"preferred": "block"}),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "true"}, {"unconstrained": True}),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "maybe"}, {}),
        (
            {
                "kueue.x-k8s.io/podset-required-topology": "block",
                "kueue.x-k8s.io/podset-slice-required-topology": "rack",
                "kueue.x-k8s.io/podset-slice-size": "2",
            },
            {"required": "block", "podSetSliceRequiredTopology": "rack", "podSetSliceSize": 2},
        ),
    ],
)
def test_a_pod_sets_topology_request_is_read_from_its_template_annotations(
    annotations: dict[str, str], request_: dict[str, Any]
) -> None:
    template = {"metadata": {"annotations": annotations}, "spec": {"containers": []}}
    assert topology_request(template) == {"podIndexLabel": "tfjob.dev/replica-index", **request_}


def test_an_admission_whose_flavor_cannot_be_read_waits_and_says_so() -> None:
    plan = decide_observing(
        queued(), [], [], NOW, None, [workload(ADMITTED, flavor="gone")], flavors={}
    )
    assert plan.create_pods == ()
    assert suspended(plan)["message"].endswith(
        f"Kueue: ResourceFlavor gone of Workload {workload_name(JOB)} cannot be read (absent, "
        "or not readable by the operator)"
    )


def test_an_evicted_job_stops_then_gives_its_quota_back() -> None:
    running = decide_observing(
        queued(), [], [], NOW, None, [workload(ADMITTED, flavor="a100")], flavors={"a100": FLAVOR}
    ).status
    evicted = workload(
        {**ADMITTED, "Evicted": ("True", "Preempted", "Preempted to accommodate a workload")},
        flavor="a100",
    )
    pods = [pod(SPEC, k) for k in PODS]
    stopping = decide_observing(queued(running), pods, [], NOW, None, [evicted])
    assert sorted(d.name for d in stopping.delete_pods) == [f"mnist-{k}" for k in PODS]
    assert workload_writes(stopping).patch_status is None, "the quota stays until the pods are gone"
    assert suspended(stopping)["message"] == (
        "TFJob ml/mnist is suspended: Kueue took its admission back (Preempted: Preempted to "
        "accommodate a workload); it is queued again once its pods are gone."
    )

    stopped = decide_observing(queued(stopping.status), [], [], NOW, None, [evicted])
    release = workload_writes(stopped).patch_status
    assert release is not None
    target, patch = release
    assert target.name == workload_name(JOB)
    assert patch["metadata"] == {"resourceVersion": "7"}
    assert patch["status"]["admission"] is None
    written = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (written["QuotaReserved"]["status"], written["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert written["Requeued"]["status"] == "True", "a preempted Workload is queued again"
    assert written["Admitted"]["status"] == "False"
    assert written["Evicted"]["status"] == "True", "Kueue's own conditions are kept"
    assert written["Admitted"]["lastTransitionTime"] == NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert stopped.create_pods == ()

    # Quota given back, Evicted still True until Kueue admits it again: queued as any job.
    requeued = workload(
        {
            "Evicted": ("True", "Preempted", "Preempted to accommodate a workload"),
            "QuotaReserved": ("False", "Pending", "insufficient quota for cpu"),
        }
    )
    waiting = decide_observing(queued(stopped.status), [], [], NOW, None, [requeued])
    assert workload_writes(waiting).patch_status is None
    assert waiting.create_pods == ()
    assert suspended(waiting)["message"] == (
        "TFJob ml/mnist is suspended: queued in Kueue's LocalQueue team until it is admitted. "
        "Kueue: insufficient quota for cpu"
    )


def test_a_finished_job_marks_its_workload_finished() -> None:
    status = {
        "conditions": [
            {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "done"}
        ]
    }
    plan = decide_observing(queued(status), [], [], NOW, None, [workload(ADMITTED, flavor="a100")])
    finishing = workload_writes(plan).patch_status
    assert finishing is not None
    _, patch = finishing
    written = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (written["Finished"]["status"], written["Finished"]["reason"]) == ("True", "Succeeded")
    assert written["Finished"]["message"] == "done"
    assert written["QuotaReserved"]["status"] == "False"
    finished = workload({**ADMITTED, "Finished": ("True", "Succeeded", "done")})
    assert (
        workload_writes(
            decide_observing(queued(status), [], [], NOW, None, [finished])
        ).patch_status
        is None
    )


def test_changed_replicas_replace_the_workload() -> None:
    grown = {"tfReplicaSpecs": {**SPEC["tfReplicaSpecs"], "Worker": replica_spec(3)}}
    plan = decide_observing(queued(spec=grown), [], [], NOW, None, [workload()])
    assert [(w.name, why) for w, why in workload_writes(plan).delete] == [
        (workload_name(JOB), "the replicas changed")
    ]
    assert workload_writes(plan).create is None, "the new one waits until the old one is gone"


def test_suspending_a_queued_job_leaves_the_queue() -> None:
    paused = {**SPEC, "runPolicy": {"suspend": True}}
    plan = decide_observing(
        queued(spec=paused), [], [], NOW, None, [workload(ADMITTED, flavor="a100")]
    )
    assert [why for _, why in workload_writes(plan).delete] == ["the TFJob is suspended"]
    assert suspended(plan)["message"] == "TFJob ml/mnist is suspended."


def test_a_kubeflow_job_queues_through_the_operators_workload() -> None:
    """Kueue without its Kubeflow integration (its default): the operator is the job's
    controller, as for tfjob.dev's."""
    kubeflow = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    plan = decide_observing(queued(ref=kubeflow), [], [], NOW)
    made = workload_writes(plan).create
    assert made is not None
    assert made["metadata"]["labels"]["tfjob.dev/controller-uid"] == JOB.uid
    assert plan.create_pods == ()


def test_a_kubeflow_job_kueue_made_a_workload_for_is_left_to_kueue() -> None:
    """Kueue's own Kubeflow integration on: it suspended the job, made its Workload and
    resumed it; the operator makes none, and runs the pods."""
    kubeflow = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    kueues = WorkloadObservation("tfjob-mnist-1a2b3", "w-uid", "1", 1, JOB.uid, None)
    plan = decide_observing(queued(ref=kubeflow), [], [], NOW, None, [kueues])
    assert workload_writes(plan).create is None
    assert len(plan.create_pods) == 3
    paused = queued(ref=kubeflow, spec={**SPEC, "runPolicy": {"suspend": True}})
    assert workload_writes(decide_observing(paused, [], [], NOW, None, [kueues])).delete == [], (
        "Kueue's own"
    )


def test_the_operators_route_is_every_tfjob_dev_job_and_kubeflow_jobs_kueue_has_not_taken() -> None:
    kueues = WorkloadObservation("tfjob-mnist-1a2b3", "w-uid", "1", 1, JOB.uid, None)
    ours = workload()
    assert ours.made_here
    assert not kueues.made_here
    assert on_operators_route(TFJOB_DEV, [kueues])
    assert on_operators_route(KUBEFLOW, [])
    assert on_operators_route(KUBEFLOW, [ours])
    assert not on_operators_route(KUBEFLOW, [kueues])


def test_a_flavor_is_read_with_its_node_labels_and_tolerations() -> None:
    read = observe_flavor({"spec": {"nodeLabels": {"pool": "a100"}, "tolerations": []}})
    assert read == FlavorObservation({"pool": "a100"}, ())
