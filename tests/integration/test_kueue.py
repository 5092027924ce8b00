"""Kueue admits TFJobs of both API groups through the Workloads the operator makes.

The real Kueue (KUEUE_VERSION, built from its Go module) runs beside the local cluster as its
default configuration has it now, its Kubeflow integration off, with both APIs' TFJobs as
external frameworks (support/kueue.py). A TFJob labelled with a LocalQueue gets one Workload,
made by the operator; it waits, without pods, while its ClusterQueue lacks quota, and runs
once admitted, on the nodes and with the tolerations of the flavor it was admitted to; an
evicted or preempted one stops, gives its quota back and runs again once readmitted; its
priority and its replicas' topology requests reach the Workload, and Kueue's topology
assignment reaches its pods. test_kueue_kubeflow_integration.py: the same cluster with Kueue's
own Kubeflow integration on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from support.cluster import Kubectl
from support.kueue import (
    KUEUE_API,
    POOL_LABEL,
    PRIORITY_LABEL,
    apply,
    cluster_queue,
    delete,
    flavor,
    local_queue,
    made_by_operator,
    preempting_queue_in,
    queued_tfjob,
    suspended,
    suspended_message,
    wait_stopped_by_kueue,
    wait_workload_condition,
    workload_condition,
    workload_of,
)
from support.tfjobs import TFJobs, condition

from harness.operator_process import OperatorProcess
from tfjob_localcluster.addons.kueue import Kueue
from tfjob_localcluster.local.cluster import LocalCluster

#: The node labels of the topology the TAS test's flavor places pods in.
BLOCK_LABEL = "tfjob.dev/test-block"
RACK_LABEL = "tfjob.dev/test-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@pytest.fixture
def dev_jobs(kubeflow_operator: OperatorProcess, namespace: str, kubeconfig: str) -> TFJobs:
    """tfjob.dev/v1 TFJob helpers, run by the module's operator (it serves both groups)."""
    return TFJobs(kubeconfig, namespace)


@pytest.fixture(params=["kubeflow.org/v1", "tfjob.dev/v1"])
def jobs(request: pytest.FixtureRequest, kubeflow_jobs: TFJobs, dev_jobs: TFJobs) -> TFJobs:
    """The TFJob helpers of each API group in turn."""
    return kubeflow_jobs if request.param == "kubeflow.org/v1" else dev_jobs


def api_version(jobs: TFJobs) -> str:
    return f"{jobs.group}/v1"


def test_queued_jobs_run_one_after_the_other_within_the_quota(
    jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    first = jobs.create(queued_tfjob("first", queue, "600m", api_version(jobs)))
    assert not suspended(first), "no webhook suspends it: the operator holds its pods back"
    jobs.wait_state("first", "Running", 60)
    (pod,) = jobs.pods("first")
    assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "queued"}
    assert any(t["key"] == "tfjob.dev/queued" for t in pod["spec"].get("tolerations") or [])
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    workload = workload_of(kubectl, jobs.namespace, first["metadata"]["uid"])
    assert workload is not None
    assert made_by_operator(workload)
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == workload["metadata"]["name"]
    assert workload["spec"]["queueName"] == queue
    assert [(s["name"], s["count"]) for s in workload["spec"]["podSets"]] == [("worker", 1)]
    assert workload_condition(workload, "Admitted") == "True"

    second = jobs.create(queued_tfjob("second", queue, "600m", api_version(jobs)))
    waiting = jobs.wait_for(
        "second", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    held = condition(waiting, "Suspended")
    assert held["reason"] == "TFJobSuspended"
    assert f"queued in Kueue's LocalQueue {queue}" in held["message"]
    assert "quota for cpu" in held["message"]
    assert jobs.pods("second") == []

    kubectl.tell_to_finish(jobs.namespace, "first-worker-0")
    jobs.wait_state("first", "Succeeded", 60)
    wait_workload_condition(
        jobs, kubectl, first, "Finished", "True", "the Workload Finished, its quota given back"
    )
    resumed = jobs.wait_state("second", "Running", 60)
    assert condition(resumed, "Suspended")["reason"] == "TFJobResumed"
    kubectl.tell_to_finish(jobs.namespace, "second-worker-0")
    jobs.wait_state("second", "Succeeded", 60)
    assert workload_of(kubectl, jobs.namespace, second["metadata"]["uid"]) is not None


def test_a_job_larger_than_the_quota_never_starts(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    created = kubeflow_jobs.create(queued_tfjob("huge", queue, "2"))
    # The TFJob says why, in Kueue's words, as soon as Kueue has said it.
    waiting = kubeflow_jobs.wait_for(
        "huge", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert "insufficient quota for cpu" in suspended_message(waiting)
    assert kubeflow_jobs.pods("huge") == []
    workload = workload_of(kubectl, kubeflow_jobs.namespace, created["metadata"]["uid"])
    assert workload_condition(workload, "QuotaReserved") == "False"


def test_a_job_in_a_queue_that_does_not_exist_says_so(kubeflow_jobs: TFJobs, kueue: Kueue) -> None:
    kubeflow_jobs.create(queued_tfjob("lost", "no-such-queue", "100m"))
    waiting = kubeflow_jobs.wait_for(
        "lost", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert suspended_message(waiting).endswith("Kueue: LocalQueue no-such-queue doesn't exist")
    assert kubeflow_jobs.pods("lost") == []


def test_an_evicted_job_stops_and_runs_again_when_readmitted(
    dev_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    created = dev_jobs.create(queued_tfjob("evicted", queue, "300m", "tfjob.dev/v1"))
    dev_jobs.wait_state("evicted", "Running", 60)
    workload = workload_of(kubectl, dev_jobs.namespace, created["metadata"]["uid"])
    assert workload is not None
    name = workload["metadata"]["name"]

    def activate(active: bool) -> None:
        patch = json.dumps({"spec": {"active": active}})
        kubectl("patch", "workload", name, "-n", dev_jobs.namespace, "--type=merge", "-p", patch)

    # Deactivating the Workload is how Kueue's users take a job out: Kueue evicts it.
    activate(False)
    wait_stopped_by_kueue(dev_jobs, "evicted", "Deactivated")
    wait_workload_condition(
        dev_jobs, kubectl, created, "QuotaReserved", "False", "the quota given back, pods gone"
    )

    activate(True)
    dev_jobs.wait_state("evicted", "Running", 60)
    kubectl.tell_to_finish(dev_jobs.namespace, "evicted-worker-0")
    dev_jobs.wait_state("evicted", "Succeeded", 60)


@pytest.fixture
def priorities(kueue: Kueue, kubectl: Kubectl, namespace: str) -> Iterator[tuple[str, str, str]]:
    """A LocalQueue that preempts lower priorities, and the two priorities (queue, low,
    urgent: support/kueue.py's preempting_queue_in)."""
    with preempting_queue_in(kubectl, namespace) as names:
        yield names


def test_a_higher_priority_job_preempts_a_lower_one_which_runs_again_after(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, priorities: tuple[str, str, str]
) -> None:
    queue, low, urgent = priorities
    namespace = kubeflow_jobs.namespace
    background = kubeflow_jobs.create(
        queued_tfjob("background", queue, "600m", labels={PRIORITY_LABEL: low})
    )
    kubeflow_jobs.wait_state("background", "Running", 60)
    low_workload = workload_of(kubectl, namespace, background["metadata"]["uid"])
    assert low_workload is not None
    assert low_workload["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": low,
    }
    assert low_workload["spec"]["priority"] == 100

    body = queued_tfjob("urgent", queue, "600m")
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = urgent
    pressing = kubeflow_jobs.create(body)
    wait_stopped_by_kueue(kubeflow_jobs, "background", "Preempted")
    kubeflow_jobs.wait_state("urgent", "Running", 60)
    high_workload = workload_of(kubectl, namespace, pressing["metadata"]["uid"])
    assert high_workload is not None
    assert high_workload["spec"]["priorityClassRef"]["kind"] == "PriorityClass"
    assert high_workload["spec"]["priority"] == 1000
    waiting = kubeflow_jobs.wait_for(
        "background", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert "quota for cpu" in suspended_message(waiting)

    kubectl.tell_to_finish(kubeflow_jobs.namespace, "urgent-worker-0")
    kubeflow_jobs.wait_state("urgent", "Succeeded", 60)
    kubeflow_jobs.wait_state("background", "Running", 60)
    kubectl.tell_to_finish(kubeflow_jobs.namespace, "background-worker-0")
    kubeflow_jobs.wait_state("background", "Succeeded", 60)
    assert workload_of(kubectl, namespace, background["metadata"]["uid"]) is not None


@pytest.fixture
def topology_queue(
    kueue: Kueue, kubectl: Kubectl, local_cluster: LocalCluster, namespace: str
) -> Iterator[str]:
    """A LocalQueue (4 CPUs: more than the node has) whose flavor places pods by Kueue's
    Topology Aware Scheduling, on a topology of blocks, racks and hosts; the node is
    labelled into block-a, rack-a."""
    node = local_cluster.node_name
    levels = [BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL]
    made = [
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": f"{namespace}-topology"},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]},
        },
        flavor(
            f"{namespace}-tas",
            nodeLabels={POOL_LABEL: "queued"},
            topologyName=f"{namespace}-topology",
        ),
        cluster_queue(f"{namespace}-cq", f"{namespace}-tas", "4"),
    ]
    kubectl("label", "node", node, f"{BLOCK_LABEL}=block-a", f"{RACK_LABEL}=rack-a", "--overwrite")
    apply(kubectl, *made, local_queue(namespace, f"{namespace}-cq"))
    yield "team"
    delete(kubectl, *reversed(made))
    kubectl("label", "node", node, f"{BLOCK_LABEL}-", f"{RACK_LABEL}-")


def test_a_replicas_topology_request_reaches_the_workload_and_kueues_assignment_the_pods(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, local_cluster: LocalCluster, topology_queue: str
) -> None:
    body = queued_tfjob("placed", topology_queue, "100m", replicas=2)
    template = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK_LABEL}}
    created = kubeflow_jobs.create(body)
    kubeflow_jobs.wait_state("placed", "Running", 60)
    workload = workload_of(kubectl, kubeflow_jobs.namespace, created["metadata"]["uid"])
    assert workload is not None
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {
        "required": RACK_LABEL,
        "podIndexLabel": "tfjob.dev/replica-index",
    }
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["topologyAssignment"]["levels"][-1] == HOSTNAME_LABEL
    pods = kubeflow_jobs.pods("placed")
    assert len(pods) == 2
    for pod in pods:
        # Created held by Kueue's gate; Kueue lifted it and put the pod on its domain.
        assert not pod["spec"].get("schedulingGates")
        assert pod["spec"]["nodeSelector"][POOL_LABEL] == "queued"
        assert pod["spec"]["nodeSelector"][HOSTNAME_LABEL] == local_cluster.node_name
        assert pod["spec"].get("nodeName") == local_cluster.node_name
    kubectl.tell_to_finish(kubeflow_jobs.namespace, "placed-worker-0")
    kubectl.tell_to_finish(kubeflow_jobs.namespace, "placed-worker-1")
    kubeflow_jobs.wait_state("placed", "Succeeded", 60)


def test_a_job_no_domain_of_its_required_topology_can_hold_waits_with_kueues_reason(
    kubeflow_jobs: TFJobs, topology_queue: str
) -> None:
    """Within the quota, but the one rack's one node cannot hold both replicas: Kueue does
    not admit it, and the job says why."""
    body = queued_tfjob("crowded", topology_queue, "1500m", replicas=2)
    template = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": RACK_LABEL}}
    kubeflow_jobs.create(body)
    waiting = kubeflow_jobs.wait_for(
        "crowded", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert "topology" in suspended_message(waiting)
    assert kubeflow_jobs.pods("crowded") == []
