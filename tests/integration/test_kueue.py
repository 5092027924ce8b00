"""Kueue admits kubeflow.org/v1 TFJobs run by `tfjob-operator run --kubeflow`.

The real Kueue (KUEUE_VERSION, built from its Go module) runs beside the local cluster with
its webhooks (tfjob_localcluster.kueue). A TFJob labelled with a LocalQueue is created
suspended by Kueue's webhook, waits while its ClusterQueue lacks quota, and runs once
admitted, on the nodes and with the tolerations of the flavor it was admitted to.
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


def queued_tfjob(name: str, queue: str, cpu: str) -> dict[str, Any]:
    worker = shell_replica(UNTIL_TOLD)
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": cpu}}
    body = tfjob(name, {"Worker": worker})
    body["apiVersion"] = "kubeflow.org/v1"
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return body


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
