"""The local cluster's node: a kubelet with containerd, set up the way a cluster needs it.

What is tested is the setup, not the kubelet: registration and capacity (GPUs from the
device plugin), logs and exec through the API server with a verified serving
certificate, cgroups that enforce limits, the capability workaround for Guaranteed pods,
a non-root pod with a service account token while the state dir lies in a directory
closed to others, and nothing of a pod's mounts on the host.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.cluster import Kubectl
from support.pods import Pods, container, container_status, pod_manifest
from support.tfjobs import condition, find_condition
from support.waiting import wait_until

from tfjob_localcluster.images.catalog import TRAINER
from tfjob_localcluster.local.cluster import LocalCluster

pytestmark = pytest.mark.integration


def test_node_is_ready_on_containerd_with_gpus_from_the_device_plugin(
    local_cluster: LocalCluster, kubectl: Kubectl
) -> None:
    node = json.loads(kubectl("get", "node", local_cluster.node_name, "-o", "json").stdout)
    assert condition(node, "Ready")["status"] == "True"
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert info["kubeletVersion"] == local_cluster.binaries.kubernetes_version
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == local_cluster.node_ip
    # The kubelet creates its lease once registered, and renews it.
    lease = "lease", "-n", "kube-node-lease", local_cluster.node_name
    wait_until(
        lambda: kubectl("get", *lease, check=False).returncode == 0,
        30,
        "the node's lease",
        interval=0.5,
    )
    holder = kubectl("get", *lease, "-o", "jsonpath={.spec.holderIdentity}").stdout
    assert holder == local_cluster.node_name


def test_exit_code_logs_and_exec_go_through_the_api_server(
    pods: Pods, kubectl: Kubectl, namespace: str
) -> None:
    pods.create(pod_manifest("fails", ["sh", "-c", "echo to stdout; echo to stderr >&2; exit 3"]))
    failed = pods.wait_phase("fails", "Failed")
    terminated = container_status(failed)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    # The API server verifies the kubelet's serving certificate against the cluster CA.
    logged = kubectl("logs", "-n", namespace, "fails").stdout
    assert sorted(logged.splitlines()) == ["to stderr", "to stdout"]
    pods.create(pod_manifest("runs", ["sleep", "3600"], terminationGracePeriodSeconds=1))
    pods.wait_running("runs")
    done = kubectl("exec", "-n", namespace, "runs", "--", "sh", "-c", "echo $((6 * 7))")
    assert done.stdout == "42\n"


def test_a_container_over_its_memory_limit_is_oom_killed(pods: Pods) -> None:
    pods.create(
        pod_manifest(
            "hungry",
            containers=[
                container(
                    "main",
                    ["sh", "-c", "head -c 200000000 /dev/zero | tail > /dev/null"],
                    resources={"limits": {"memory": "32Mi"}},
                )
            ],
        )
    )
    terminated = container_status(pods.wait_phase("hungry", "Failed"))["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)


def test_guaranteed_pod_runs_in_its_own_cgroup_with_its_limits(
    pods: Pods, kubectl: Kubectl, namespace: str, local_cluster: LocalCluster
) -> None:
    limits = {"cpu": "100m", "memory": "64Mi"}
    pods.create(
        pod_manifest(
            "sized",
            containers=[
                container(
                    "main",
                    ["sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 3600"],
                    resources={"limits": limits, "requests": limits},
                )
            ],
            terminationGracePeriodSeconds=1,
        )
    )
    pod = pods.wait_running("sized")
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert pods.wait_log("sized", lambda text: text.endswith("\n"), "a line") == "67108864\n"
    cgroup = kubectl("exec", "-n", namespace, "sized", "--", "cat", "/proc/1/cgroup").stdout
    assert local_cluster.slot is not None
    assert f"{local_cluster.slot.cgroup_root}/kubepods/pod{pod['metadata']['uid']}" in cgroup


def test_non_root_pod_reads_its_token_and_lists_itself_while_the_host_stays_untouched(
    pods: Pods, project_images: tuple[str, ...], k8s_client: Any, local_cluster: LocalCluster,
    namespace: str,
) -> None:  # fmt: skip
    """The state dir lies in a 0700 directory (as under root's home); the token's mount
    target exists in the image, never on the host."""
    from kubernetes import client

    host_target = Path("/run/secrets/kubernetes.io/serviceaccount")
    existed = host_target.exists()
    closed = local_cluster.state_dir.parent
    assert closed.stat().st_mode & 0o077 == 0, f"{closed} must be closed to others"
    rbac = client.RbacAuthorizationV1Api(k8s_client)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        },
    )
    program = (
        "import json, os, ssl, urllib.request\n"
        "base = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "token = open(base + 'token').read()\n"
        "namespace = open(base + 'namespace').read()\n"
        "context = ssl.create_default_context(cafile=base + 'ca.crt')\n"
        "url = f'https://kubernetes.default.svc/api/v1/namespaces/{namespace}/pods'\n"
        "request = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + token})\n"
        "listed = json.load(urllib.request.urlopen(request, context=context))['items']\n"
        "print(json.dumps({'uid': os.getuid(), 'pods': [p['metadata']['name'] for p in listed]}))\n"
    )
    manifest = pod_manifest("reader", ["python", "-c", program], image=TRAINER)
    manifest["spec"]["securityContext"] = {"runAsUser": 1234, "runAsNonRoot": True}
    pods.create(manifest)
    pod = pods.wait_phase("reader", "Succeeded", "Failed", timeout=120)
    log = pods.log("reader")
    assert pod["status"]["phase"] == "Succeeded", log
    assert json.loads(log) == {"uid": 1234, "pods": ["reader"]}
    assert host_target.exists() == existed


def test_gpu_requests_are_scheduled_and_devices_never_shared(pods: Pods) -> None:
    def gpu_pod(name: str, count: int) -> dict[str, Any]:
        return pod_manifest(
            name,
            containers=[
                container(
                    "main",
                    ["sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES"; sleep 3600'],
                    resources={"limits": {"nvidia.com/gpu": str(count)}},
                )
            ],
            terminationGracePeriodSeconds=1,
        )

    pods.create(gpu_pod("too-many", 5))
    pending = pods.wait(
        "too-many",
        lambda p: (find_condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable",
        "Unschedulable",
    )
    assert "Insufficient nvidia.com/gpu" in condition(pending, "PodScheduled")["message"]
    seen: list[str] = []
    for name, count in (("gpu-a", 1), ("gpu-b", 3)):
        pods.create(gpu_pod(name, count))
    for name in ("gpu-a", "gpu-b"):
        pods.wait_running(name)
        seen += pods.wait_log(name, lambda text: text.endswith("\n"), "a line").strip().split(",")
    assert sorted(seen) == ["0", "1", "2", "3"]
    time.sleep(1)
    assert pods.get("too-many")["status"]["phase"] == "Pending"
