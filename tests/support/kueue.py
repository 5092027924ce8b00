"""Kueue beside the local cluster for the tests of queued TFJobs: the fixtures and helpers.

`kueue` starts the real Kueue (KUEUE_VERSION) for a test module as Kueue's default
configuration has it, its Kubeflow integration off, so that both APIs' TFJobs queue through
the Workloads the operator makes; a module that sets `KUEUE_KUBEFLOW_INTEGRATION = True`
gets the integration on, and Kueue makes the Workloads of kubeflow.org's TFJobs. `queue`
gives each test a LocalQueue of its own on a ClusterQueue of 1 CPU.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from harness.operator_process import OperatorProcess
from support.builders import UNTIL_TOLD, shell_replica, tfjob
from support.tfjobs import TFJobs, find_condition
from tfjob_localcluster.addons.kueue import Kueue
from tfjob_localcluster.local.cluster import LocalCluster

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The node label the test flavors select the local cluster's node by.
POOL_LABEL = "tfjob.dev/test-pool"
#: The toleration the default flavor adds to the pods admitted to it.
QUEUED_TOLERATION = {"key": "tfjob.dev/queued", "operator": "Exists", "effect": "NoSchedule"}
#: The LocalQueue of a test's namespace (queue_in).
LOCAL_QUEUE = "team"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kueue(
    request: pytest.FixtureRequest,
    local_cluster: LocalCluster,
    kubectl: Any,
    kubeflow_operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kueue]:
    """Kueue for the module, started after Kubeflow's CRD (its integration, where on, needs
    it); the node carries the label of the tests' flavors."""
    assert local_cluster.control_plane is not None
    running = Kueue(
        local_cluster.kubeconfig,
        local_cluster.kubectl,
        local_cluster.control_plane.ca,
        tmp_path_factory.mktemp("kueue"),
        kubeflow_integration=getattr(request.module, "KUEUE_KUBEFLOW_INTEGRATION", False),
    )
    kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}=queued", "--overwrite")
    running.start()
    try:
        yield running
    finally:
        running.stop()
        kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}-")


def flavor(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster_queue(name: str, flavor_name: str, cpu: str, **spec: Any) -> Obj:
    """A ClusterQueue of `cpu` CPUs in one flavor, open to every namespace."""
    quota = {"name": flavor_name, "resources": [{"name": "cpu", "nominalQuota": cpu}]}
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [quota]}],
            **spec,
        },
    }


def local_queue(namespace: str, cluster_queue_name: str, name: str = LOCAL_QUEUE) -> Obj:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def apply(kubectl: Any, *objects: Obj) -> None:
    for obj in objects:
        kubectl("apply", "-f", "-", input=json.dumps(obj))


def delete(kubectl: Any, *objects: Obj) -> None:
    """Deletes cluster-scoped objects a test made (namespaced ones go with the namespace)."""
    for obj in objects:
        kind = obj["kind"].lower()
        kubectl("delete", kind, obj["metadata"]["name"], "--wait=false", "--ignore-not-found")


@contextlib.contextmanager
def queue_in(kubectl: Any, namespace: str) -> Iterator[str]:
    """A LocalQueue in `namespace`, on a ClusterQueue of 1 CPU whose flavor selects the
    labelled node and adds a toleration; its name. The cluster-wide objects go after."""
    made = [
        flavor(
            f"{namespace}-flavor",
            nodeLabels={POOL_LABEL: "queued"},
            tolerations=[QUEUED_TOLERATION],
        ),
        cluster_queue(f"{namespace}-cq", f"{namespace}-flavor", "1"),
    ]
    apply(kubectl, *made, local_queue(namespace, f"{namespace}-cq"))
    try:
        yield LOCAL_QUEUE
    finally:
        delete(kubectl, *reversed(made))


@contextlib.contextmanager
def preempting_queue_in(kubectl: Any, namespace: str) -> Iterator[tuple[str, str, str]]:
    """The namespace's LocalQueue on a ClusterQueue of 1 CPU that preempts lower
    priorities, a WorkloadPriorityClass of 100 and a pods' PriorityClass of 1000: their
    names (queue, low, urgent), all deleted after."""
    low, urgent = f"{namespace}-low", f"{namespace}-urgent"
    made = [
        {
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": low},
            "value": 100,
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": urgent},
            "value": 1000,
        },
        flavor(f"{namespace}-flavor", nodeLabels={POOL_LABEL: "queued"}),
        cluster_queue(
            f"{namespace}-cq",
            f"{namespace}-flavor",
            "1",
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
    ]
    apply(kubectl, *made, local_queue(namespace, f"{namespace}-cq"))
    try:
        yield LOCAL_QUEUE, low, urgent
    finally:
        delete(kubectl, *reversed(made))


@pytest.fixture
def queue(kueue: Kueue, kubectl: Any, namespace: str) -> Iterator[str]:
    """A LocalQueue in the test's namespace (queue_in)."""
    with queue_in(kubectl, namespace) as name:
        yield name


def queued_tfjob(
    name: str,
    queue: str,
    cpu: str,
    api_version: str = "kubeflow.org/v1",
    replicas: int = 1,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A TFJob of `replicas` workers requesting `cpu` each, queued in `queue`, each running
    until told."""
    worker = shell_replica(UNTIL_TOLD, replicas)
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu}}
    body = tfjob(name, {"Worker": worker})
    body["apiVersion"] = api_version
    body["metadata"]["labels"] = {QUEUE_LABEL: queue, **(labels or {})}
    return body


def workloads_of(kubectl: Any, namespace: str, uid: str) -> list[Obj]:
    """The Workloads the TFJob of `uid` owns."""
    found = json.loads(kubectl("get", "workloads", "-n", namespace, "-o", "json").stdout)
    return [
        w
        for w in found["items"]
        if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences") or [])
    ]


def workload_of(kubectl: Any, namespace: str, uid: str) -> Obj | None:
    """The one Workload the TFJob of `uid` owns, if any; more than one fails the test."""
    found = workloads_of(kubectl, namespace, uid)
    assert len(found) <= 1, f"two Workloads for one job: {[w['metadata']['name'] for w in found]}"
    return found[0] if found else None


def made_by_operator(workload: Obj) -> bool:
    return "tfjob.dev/controller-uid" in (workload["metadata"].get("labels") or {})


def workload_condition(workload: Obj | None, kind: str) -> str | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == kind), None)


def suspended(job: Obj) -> bool:
    return bool((job["spec"].get("runPolicy") or {}).get("suspend"))


def suspended_message(job: Obj) -> str:
    held = find_condition(job, "Suspended")
    return str(held["message"]) if held and held["status"] == "True" else ""


def wait_stopped_by_kueue(jobs: TFJobs, name: str, reason: str) -> None:
    """Until the job says Kueue took its admission back for `reason` (Preempted,
    Deactivated) and its pods are gone."""
    stopped = jobs.wait_for(
        name,
        lambda job: "Kueue took its admission back" in suspended_message(job),
        f"Suspended after the eviction ({reason})",
        30,
    )
    assert reason in suspended_message(stopped)
    jobs.wait_pods(name, lambda pods: pods == [], "the stopped job's pods deleted")


def wait_workload_condition(
    jobs: TFJobs, kubectl: Any, job: Obj, kind: str, status: str, what: str
) -> None:
    """Until the job's Workload has condition `kind` at `status`."""
    jobs.poll(
        job["metadata"]["name"],
        lambda: workload_of(kubectl, jobs.namespace, job["metadata"]["uid"]),
        lambda found: workload_condition(found, kind) == status,
        what,
        30,
    )
