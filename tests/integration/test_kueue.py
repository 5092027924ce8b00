"""Kueue admits the TFJobs of `tfjob-operator run --kubeflow`, of both API groups.

The real Kueue (KUEUE_VERSION, built from its Go module) runs beside the local cluster with
its webhooks (tfjob_localcluster.kueue). A kubeflow.org TFJob labelled with a LocalQueue is
created suspended by Kueue's webhook, waits while its ClusterQueue lacks quota, and runs
once admitted, on the nodes and with the tolerations of the flavor it was admitted to. A
tfjob.dev TFJob does the same through the Workload the operator makes for it (queueing.py),
and an evicted one stops and is queued again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.operator_process import OperatorProcess
from support.tfjobs import TFJobs, condition, shell_replica, tfjob

from tfjob_localcluster.cluster import LocalCluster
from tfjob_localcluster.kueue import Kueue
from tfjob_localcluster.pytest_plugin import Kubectl

pytestmark = pytest.mark.integration

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POOL_LABEL = "tfjob.dev/test-pool"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
#: Runs until the test creates /done in the container.
UNTIL_TOLD = "until [ -e /done ]; do sleep 0.2; done"


@pytest.fixture(scope="module")
def kueue(
    local_cluster: LocalCluster,
    kubectl: Kubectl,
    kubeflow_operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kueue]:
    """Kueue, started after Kubeflow's CRD so that its TFJob integration is on; the node
    carries the label of the test's flavor."""
    assert local_cluster.control_plane is not None
    running = Kueue(
        local_cluster.kubeconfig,
        local_cluster.kubectl,
        local_cluster.control_plane.ca,
        tmp_path_factory.mktemp("kueue"),
    )
    kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}=queued", "--overwrite")
    running.start()
    try:
        yield running
    finally:
        running.stop()
        kubectl("label", "node", local_cluster.node_name, f"{POOL_LABEL}-")


@pytest.fixture
def dev_jobs(kubeflow_operator: OperatorProcess, k8s_client: Any, namespace: str) -> TFJobs:
    """tfjob.dev/v1 TFJob helpers, run by the module's operator (it serves both groups)."""
    return TFJobs(k8s_client, namespace)


@pytest.fixture
def queue(kueue: Kueue, kubectl: Kubectl, namespace: str) -> Iterator[str]:
    """A LocalQueue in the test's namespace, on a ClusterQueue of 1 CPU whose flavor
    selects the labelled node and adds a toleration."""
    flavor = f"{namespace}-flavor"
    cluster_queue = f"{namespace}-cq"
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {
                "nodeLabels": {POOL_LABEL: "queued"},
                "tolerations": [
                    {"key": "tfjob.dev/queued", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "1"}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]
    for obj in objects:
        kubectl("apply", "-f", "-", input=json.dumps(obj))
    yield "team"
    kubectl("delete", "clusterqueue", cluster_queue, "--wait=false")
    kubectl("delete", "resourceflavor", flavor, "--wait=false")


def queued_tfjob(
    name: str, queue: str, cpu: str, api_version: str = "kubeflow.org/v1"
) -> dict[str, Any]:
    worker = shell_replica(UNTIL_TOLD)
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu}}
    body = tfjob(name, {"Worker": worker})
    body["apiVersion"] = api_version
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return body


def workload_of(kubectl: Kubectl, namespace: str, uid: str) -> dict[str, Any] | None:
    """The Workload the TFJob of `uid` owns, if any."""
    found = json.loads(kubectl("get", "workloads", "-n", namespace, "-o", "json").stdout)
    owned = [
        w
        for w in found["items"]
        if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences") or [])
    ]
    return owned[0] if owned else None


def workload_condition(workload: dict[str, Any] | None, kind: str) -> str | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == kind), None)


def suspended(job: dict[str, Any]) -> bool:
    return bool(job["spec"]["runPolicy"].get("suspend"))


def suspended_message(job: dict[str, Any]) -> str:
    held = condition(job, "Suspended")
    return str(held["message"]) if held and held["status"] == "True" else ""


def test_queued_jobs_run_one_after_the_other_within_the_quota(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    first = kubeflow_jobs.create(queued_tfjob("first", queue, "600m"))
    # Kueue's webhook suspends the job at creation; admission resumes it.
    assert suspended(first)
    kubeflow_jobs.wait_state("first", "Running", 60)
    (pod,) = kubeflow_jobs.pods("first")
    assert pod.spec.node_selector == {POOL_LABEL: "queued"}
    assert any(t.key == "tfjob.dev/queued" for t in pod.spec.tolerations or [])

    kubeflow_jobs.create(queued_tfjob("second", queue, "600m"))
    waiting = kubeflow_jobs.wait_state("second", "Suspended", 30)
    assert suspended(waiting)
    held = condition(waiting, "Suspended")
    assert held is not None
    assert held["reason"] == "TFJobSuspended"
    assert f"queued in Kueue's LocalQueue {queue}" in held["message"]
    assert kubeflow_jobs.pods("second") == []

    kubectl("exec", "-n", kubeflow_jobs.namespace, "first-worker-0", "--", "touch", "/done")
    kubeflow_jobs.wait_state("first", "Succeeded", 60)
    resumed = kubeflow_jobs.wait_state("second", "Running", 60)
    assert not suspended(resumed)
    assert condition(resumed, "Suspended")["status"] == "False"  # type: ignore[index]
    kubectl("exec", "-n", kubeflow_jobs.namespace, "second-worker-0", "--", "touch", "/done")
    kubeflow_jobs.wait_state("second", "Succeeded", 60)


def test_a_job_larger_than_the_quota_never_starts(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    kubeflow_jobs.create(queued_tfjob("huge", queue, "2"))
    # The TFJob says why, in Kueue's words, as soon as Kueue has said it.
    waiting = kubeflow_jobs.wait_for(
        "huge", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert "insufficient quota for cpu" in suspended_message(waiting)
    assert kubeflow_jobs.pods("huge") == []
    workloads = json.loads(
        kubectl("get", "workloads", "-n", kubeflow_jobs.namespace, "-o", "json").stdout
    )["items"]
    (workload,) = [
        w
        for w in workloads
        if w["metadata"]["ownerReferences"][0]["uid"] == waiting["metadata"]["uid"]
    ]
    admitted = {c["type"]: c for c in workload["status"].get("conditions") or []}
    assert admitted["QuotaReserved"]["status"] == "False"


def test_a_job_in_a_queue_that_does_not_exist_says_so(kubeflow_jobs: TFJobs, kueue: Kueue) -> None:
    kubeflow_jobs.create(queued_tfjob("lost", "no-such-queue", "100m"))
    waiting = kubeflow_jobs.wait_for(
        "lost", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert suspended_message(waiting).endswith("Kueue: LocalQueue no-such-queue doesn't exist")
    assert kubeflow_jobs.pods("lost") == []


def test_tfjob_dev_jobs_queue_through_the_workloads_the_operator_makes(
    dev_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    first = dev_jobs.create(queued_tfjob("first", queue, "600m", "tfjob.dev/v1"))
    dev_jobs.wait_state("first", "Running", 60)
    (pod,) = dev_jobs.pods("first")
    assert pod.spec.node_selector == {POOL_LABEL: "queued"}
    assert any(t.key == "tfjob.dev/queued" for t in pod.spec.tolerations or [])
    workload = workload_of(kubectl, dev_jobs.namespace, first["metadata"]["uid"])
    assert workload is not None
    assert workload["spec"]["queueName"] == queue
    assert [(s["name"], s["count"]) for s in workload["spec"]["podSets"]] == [("worker", 1)]
    assert workload_condition(workload, "Admitted") == "True"

    second = dev_jobs.create(queued_tfjob("second", queue, "600m", "tfjob.dev/v1"))
    waiting = dev_jobs.wait_for(
        "second", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert f"queued in Kueue's LocalQueue {queue}" in suspended_message(waiting)
    assert "quota for cpu" in suspended_message(waiting)
    assert dev_jobs.pods("second") == []

    kubectl("exec", "-n", dev_jobs.namespace, "first-worker-0", "--", "touch", "/done")
    dev_jobs.wait_state("first", "Succeeded", 60)
    dev_jobs.poll(
        "first",
        lambda: workload_of(kubectl, dev_jobs.namespace, first["metadata"]["uid"]),
        lambda found: workload_condition(found, "Finished") == "True",
        "the Workload Finished, its quota given back",
        30,
    )
    resumed = dev_jobs.wait_state("second", "Running", 60)
    assert condition(resumed, "Suspended")["reason"] == "TFJobResumed"  # type: ignore[index]
    kubectl("exec", "-n", dev_jobs.namespace, "second-worker-0", "--", "touch", "/done")
    dev_jobs.wait_state("second", "Succeeded", 60)
    assert workload_of(kubectl, dev_jobs.namespace, second["metadata"]["uid"]) is not None


def test_an_evicted_tfjob_dev_job_stops_and_runs_again_when_readmitted(
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
    stopped = dev_jobs.wait_for(
        "evicted",
        lambda job: "Kueue took its admission back" in suspended_message(job),
        "Suspended after the eviction",
        30,
    )
    assert "Deactivated" in suspended_message(stopped)
    dev_jobs.wait_pods("evicted", lambda pods: pods == [], "the job's pods deleted")
    dev_jobs.poll(
        "evicted",
        lambda: workload_of(kubectl, dev_jobs.namespace, created["metadata"]["uid"]),
        lambda found: workload_condition(found, "QuotaReserved") == "False",
        "the quota given back once the pods were gone",
        30,
    )

    activate(True)
    dev_jobs.wait_state("evicted", "Running", 60)
    kubectl("exec", "-n", dev_jobs.namespace, "evicted-worker-0", "--", "touch", "/done")
    dev_jobs.wait_state("evicted", "Succeeded", 60)
