"""Gang-scheduled TFJobs on the local cluster, with the real gang schedulers.

scheduler-plugins' Coscheduling scheduler (SCHEDULER_PLUGINS_VERSION) and Volcano's
vc-scheduler (VOLCANO_VERSION), each built from its Go module, run beside the default
scheduler (tfjob_localcluster.addons.coscheduling, tfjob_localcluster.addons.volcano) with their own
CRDs. The session's operator gang-schedules the jobs whose templates name either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.builders import SHELL_IMAGE, UNTIL_TOLD, shell_replica, tfjob
from support.cluster import Kubectl
from support.tfjobs import TFJobs, condition, find_condition
from support.waiting import wait_until

from tfjob_localcluster.addons.coscheduling import SCHEDULER_NAME
from tfjob_localcluster.addons.volcano import Volcano
from tfjob_localcluster.local.cluster import LocalCluster

PLUGINS_GROUP = ("scheduling.x-k8s.io", "v1alpha1")
VOLCANO_GROUP = ("scheduling.volcano.sh", "v1beta1")


@pytest.fixture
def research_queue(volcano: Volcano, k8s_client: Any) -> Iterator[str]:
    custom = client.CustomObjectsApi(k8s_client)
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "research"},
        "spec": {"weight": 1, "reclaimable": True},
    }
    custom.create_cluster_custom_object(*VOLCANO_GROUP, "queues", queue)
    try:
        yield "research"
    finally:
        custom.delete_cluster_custom_object(*VOLCANO_GROUP, "queues", "research")


def gang_replica(
    script: str, replicas: int, scheduler: str = SCHEDULER_NAME, cpu: str | None = None
) -> dict[str, Any]:
    spec = shell_replica(script, replicas)
    pod_spec = spec["template"]["spec"]
    pod_spec["schedulerName"] = scheduler
    if cpu is not None:
        pod_spec["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return spec


def pod_group(k8s_client: Any, group: tuple[str, str], namespace: str, name: str) -> Any:
    """The PodGroup, or None once it is gone."""
    custom = client.CustomObjectsApi(k8s_client)
    try:
        return custom.get_namespaced_custom_object(*group, namespace, "podgroups", name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def free_millicpu(core: client.CoreV1Api, node: str) -> int:
    """The node's allocatable CPU less what its pods request, in millicores, once no pod of
    an earlier test is left to go: those of a namespace being deleted are deleted a few
    seconds later, and a gang sized against them would fit once they are gone."""

    def on_the_node() -> tuple[list[Any], list[str]]:
        """The node's live pods, and those of them going away."""
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        live = [p for p in pods if p.status.phase not in ("Succeeded", "Failed")]
        ending = {
            n.metadata.name for n in core.list_namespace().items if n.status.phase != "Active"
        }
        going = [
            f"{p.metadata.namespace}/{p.metadata.name}"
            for p in live
            if p.metadata.deletion_timestamp or p.metadata.namespace in ending
        ]
        return live, going

    live, _ = wait_until(
        on_the_node,
        120,
        lambda seen: f"the pods of earlier tests to leave the node: {seen[1]}",
        until=lambda seen: not seen[1],
        interval=1,
    )
    allocatable = core.read_node(node).status.allocatable["cpu"]
    total = int(allocatable[:-1]) if allocatable.endswith("m") else int(allocatable) * 1000
    requested = 0
    for pod in live:
        for container in pod.spec.containers:
            cpu = ((container.resources and container.resources.requests) or {}).get("cpu")
            if cpu:
                requested += int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    return total - requested


def blocker_pod(name: str, millicpu: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "sleep",
                    "image": SHELL_IMAGE,
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": f"{millicpu}m"}},
                }
            ],
        },
    }


def test_without_volcanos_crd_no_pod_starts_and_an_event_says_why(
    tfjobs: TFJobs, kubectl: Kubectl
) -> None:
    """First in the module: Volcano's CRDs are installed by the tests after it."""
    kubectl("delete", "crd", "podgroups.scheduling.volcano.sh", "--ignore-not-found")
    tfjobs.create(tfjob("early", {"Worker": gang_replica("sleep 3600", 2, "volcano")}))
    tfjobs.poll(
        "early",
        lambda: tfjobs.describe("early"),
        lambda text: "FailedCreatePodGroup" in text,
        "a FailedCreatePodGroup event",
        60,
    )
    assert "scheduling.volcano.sh/v1beta1 is not served: is its gang scheduler installed?" in (
        tfjobs.describe("early")
    )
    assert tfjobs.pods("early") == []


GANG_SCHEDULERS = [
    pytest.param("coscheduling", SCHEDULER_NAME, PLUGINS_GROUP, "scheduler-plugins", id="plugins"),
    pytest.param("volcano", "volcano", VOLCANO_GROUP, "Volcano", id="volcano"),
]


@pytest.mark.parametrize(("fixture", "scheduler", "group_version", "title"), GANG_SCHEDULERS)
def test_a_gang_that_does_not_fit_starts_no_pod_until_all_of_it_fits(
    request: pytest.FixtureRequest,
    tfjobs: TFJobs,
    k8s_client: Any,
    local_cluster: LocalCluster,
    kubectl: Kubectl,
    fixture: str,
    scheduler: str,
    group_version: tuple[str, str],
    title: str,
) -> None:
    request.getfixturevalue(fixture)
    core = client.CoreV1Api(k8s_client)
    free = free_millicpu(core, local_cluster.node_name)
    # The blocker leaves room for one worker, not for two: the default scheduler would start
    # one and leave it waiting for its peer.
    worker_cpu, blocker_cpu = free * 3 // 10, free * 6 // 10
    core.create_namespaced_pod(tfjobs.namespace, blocker_pod("blocker", blocker_cpu))
    tfjobs.poll(
        "gang",
        lambda: core.read_namespaced_pod("blocker", tfjobs.namespace),
        lambda pod: pod.status.phase == "Running",
        "the blocker pod running",
        60,
    )

    # Volcano's webhook, not run here, would put a PodGroup that names no queue in "default".
    policy = {"schedulingPolicy": {"queue": "default"}} if title == "Volcano" else {}
    created = tfjobs.create(
        tfjob(
            "gang",
            {"Worker": gang_replica(UNTIL_TOLD, 2, scheduler, f"{worker_cpu}m")},
            runPolicy=policy,
        )
    )
    stalled = tfjobs.wait_for(
        "gang",
        lambda job: (find_condition(job, "Running") or {}).get("reason") == "GangUnschedulable",
        "Running=False with reason GangUnschedulable",
        60,
    )
    message = condition(stalled, "Running")["message"]
    assert message.startswith(
        f"The gang cannot be placed (PodGroup gang ({title}, 2 pods together)): "
    )
    group = pod_group(k8s_client, group_version, tfjobs.namespace, "gang")
    assert group["spec"]["minMember"] == 2
    if title == "Volcano":
        assert set(group["spec"]["minResources"]) == {"cpu"}  # what the two workers request
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    pods = tfjobs.pods("gang")
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["schedulerName"] == scheduler
    # Long enough for Coscheduling's permit wait (10 s) to pass once: no pod is ever bound.
    watched_until = time.monotonic() + 12
    while time.monotonic() < watched_until:
        bound = [p["metadata"]["name"] for p in tfjobs.pods("gang") if p["spec"].get("nodeName")]
        assert bound == [], f"pods of an incomplete gang were bound: {bound}"
        time.sleep(0.5)

    core.delete_namespaced_pod("blocker", tfjobs.namespace, grace_period_seconds=0)
    tfjobs.wait_state("gang", "Running", 120)
    assert all(p["spec"].get("nodeName") for p in tfjobs.pods("gang"))

    kubectl.tell_to_finish(tfjobs.namespace, "gang-worker-0")
    tfjobs.wait_state("gang", "Succeeded", 60)
    tfjobs.poll(
        "gang",
        lambda: pod_group(k8s_client, group_version, tfjobs.namespace, "gang"),
        lambda found: found is None,
        "the PodGroup deleted once the job succeeded",
        60,
    )


@pytest.mark.usefixtures("coscheduling")
def test_suspending_a_gang_deletes_its_pod_group_and_resuming_creates_it_again(
    tfjobs: TFJobs, k8s_client: Any
) -> None:
    job = tfjob("pausing", {"Worker": gang_replica("sleep 3600", 2)}, runPolicy={"suspend": True})
    tfjobs.create(job)
    tfjobs.wait_state("pausing", "Suspended", 60)
    assert pod_group(k8s_client, PLUGINS_GROUP, tfjobs.namespace, "pausing") is None

    def suspend(value: bool) -> None:
        tfjobs.patch_spec("pausing", {"runPolicy": {"suspend": value}})

    suspend(False)
    tfjobs.wait_state("pausing", "Running", 90)
    assert pod_group(k8s_client, PLUGINS_GROUP, tfjobs.namespace, "pausing") is not None
    suspend(True)
    tfjobs.wait_state("pausing", "Suspended", 60)
    tfjobs.poll(
        "pausing",
        lambda: pod_group(k8s_client, PLUGINS_GROUP, tfjobs.namespace, "pausing"),
        lambda found: found is None,
        "the PodGroup deleted once the job was suspended",
        60,
    )


@pytest.mark.parametrize(
    ("scheduler", "policy", "message"),
    [
        (
            "my-scheduler",
            {"minAvailable": 1},
            "spec.runPolicy.schedulingPolicy.minAvailable: needs a gang scheduler, but the "
            "replicas name my-scheduler, not a gang scheduler",
        ),
        (
            SCHEDULER_NAME,
            {"queue": "research"},
            "spec.runPolicy.schedulingPolicy.queue: scheduler-plugins has no queues",
        ),
    ],
    ids=["unknown-scheduler", "queue-without-queues"],
)
def test_a_gang_the_operator_cannot_honour_fails_at_once_and_says_why(
    tfjobs: TFJobs, scheduler: str, policy: dict[str, Any], message: str
) -> None:
    tfjobs.create(
        tfjob(
            "wrong",
            {"Worker": gang_replica("sleep 3600", 2, scheduler)},
            runPolicy={"schedulingPolicy": policy},
        )
    )
    failed = tfjobs.wait_state("wrong", "Failed", 30)
    reason = condition(failed, "Failed")
    assert reason["reason"] == "InvalidSpec"
    assert message in reason["message"]
    assert tfjobs.pods("wrong") == []


def test_a_volcano_gang_runs_in_its_queue_with_volcanos_pod_group_and_task_counts(
    tfjobs: TFJobs, k8s_client: Any, research_queue: str
) -> None:
    created = tfjobs.create(
        tfjob(
            "volcanic",
            {
                "PS": gang_replica("sleep 3600", 1, "volcano"),
                "Worker": gang_replica("sleep 3600", 2, "volcano"),
            },
            runPolicy={
                "schedulingPolicy": {"queue": research_queue, "minResources": {"cpu": "100m"}}
            },
        )
    )
    group = tfjobs.poll(
        "volcanic",
        lambda: pod_group(k8s_client, VOLCANO_GROUP, tfjobs.namespace, "volcanic"),
        lambda found: found is not None,
        "Volcano's PodGroup",
        60,
    )
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minTaskMember"] == {"ps": 1, "worker": 2}
    assert group["spec"]["queue"] == "research"
    assert group["spec"]["minResources"] == {"cpu": "100m"}
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    pods = tfjobs.poll(
        "volcanic",
        lambda: tfjobs.pods("volcanic"),
        lambda found: len(found) == 3,
        "3 pods",
        60,
    )
    tasks = sorted(p["metadata"]["annotations"]["volcano.sh/task-spec"] for p in pods)
    assert tasks == ["ps", "worker", "worker"]
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "volcanic"
    tfjobs.wait_state("volcanic", "Running", 90)
