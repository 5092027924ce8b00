"""Networking, DNS, GPUs, service accounts and controllers of the local cluster."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from tfjob_localcluster.pytest_plugin import Kubectl
from tfjob_localcluster.testing import (
    Pods,
    condition,
    container,
    container_status,
    headless_service,
    pod_manifest,
)

pytestmark = pytest.mark.integration

# Answers "who?" on :2222 with its hostname until `expected` peers asked (a probe's bare
# connection does not count), and asks each peer name given, retrying until the name
# resolves and the peer answers.
PEER_PROGRAM = """
import socket, sys, threading, time
expected, peers = int(sys.argv[1]), sys.argv[2:]
served = threading.Semaphore(0)
server = socket.create_server(("0.0.0.0", 2222))
def serve():
    while True:
        connection, _ = server.accept()
        with connection:
            if connection.recv(4) == b"who?":
                connection.sendall(socket.gethostname().encode())
                served.release()
threading.Thread(target=serve, daemon=True).start()
deadline = time.time() + 90
for peer in peers:
    while True:
        try:
            with socket.create_connection((peer, 2222), timeout=2) as connection:
                connection.sendall(b"who?")
                print(peer, "->", connection.recv(100).decode(), flush=True)
                break
        except OSError as error:
            if time.time() > deadline:
                raise SystemExit(f"{peer}: {error}")
            time.sleep(0.2)
for _ in range(expected):
    if not served.acquire(timeout=90):
        raise SystemExit("the peers did not all connect")
"""


def test_pods_reach_each_other_on_2222_by_service_dns_names(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str
) -> None:
    for name, peer in (("alpha", "beta"), ("beta", "alpha")):
        core_v1.create_namespaced_service(namespace, headless_service(name, {"peer": name}))
        names = [f"{peer}.{namespace}.svc", f"{peer}.{namespace}.svc.cluster.local"]
        pods.create(
            pod_manifest(name, ["python", "-c", PEER_PROGRAM, "2", *names], labels={"peer": name})
        )
    for name, peer in (("alpha", "beta"), ("beta", "alpha")):
        pod = pods.wait_phase(name, "Succeeded", "Failed")
        log = kubectl("logs", "-n", namespace, name).stdout
        assert pod["status"]["phase"] == "Succeeded", log
        assert log.splitlines() == [
            f"{peer}.{namespace}.svc -> {peer}",
            f"{peer}.{namespace}.svc.cluster.local -> {peer}",
        ]


def test_pod_hostname_and_subdomain_resolve_like_kubernetes_dns(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str
) -> None:
    core_v1.create_namespaced_service(namespace, headless_service("workers", {"job": "j"}))
    pods.create(
        pod_manifest(
            "server",
            containers=[
                container(
                    "main",
                    ["python", "-c", PEER_PROGRAM, "2"],
                    readinessProbe={"tcpSocket": {"port": 2222}, "periodSeconds": 1},
                )
            ],
            labels={"job": "j"},
            hostname="worker-0",
            subdomain="workers",
        )
    )
    pods.wait_running("server")
    fqdn = f"worker-0.workers.{namespace}.svc.cluster.local"
    pods.create(
        pod_manifest("client", ["python", "-c", PEER_PROGRAM, "0", fqdn, "worker-0.workers"])
    )
    pod = pods.wait_phase("client", "Succeeded", "Failed")
    log = kubectl("logs", "-n", namespace, "client").stdout
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.splitlines() == [f"{fqdn} -> worker-0", "worker-0.workers -> worker-0"]
    assert pods.wait_phase("server", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"


def test_gpu_requests_are_scheduled_and_devices_never_shared(pods: Pods) -> None:
    def gpu_pod(name: str, count: int) -> dict[str, Any]:
        return pod_manifest(
            name,
            containers=[
                container(
                    "main",
                    [
                        "sh",
                        "-c",
                        'echo "$NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES"; sleep 3600',
                    ],
                    resources={"limits": {"nvidia.com/gpu": str(count)}},
                )
            ],
        )

    pods.create(gpu_pod("too-many", 5))
    pending = pods.wait(
        "too-many",
        lambda p: (condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable",
        "Unschedulable",
    )
    assert pending["status"]["phase"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in condition(pending, "PodScheduled")["message"]

    seen = []
    for name in ("gpu-a", "gpu-b"):
        pods.create(gpu_pod(name, 1))
    for name in ("gpu-a", "gpu-b"):
        pods.wait_running(name)
        nvidia, cuda = pods.wait_log(name, lambda text: text.endswith("\n"), "a line").split()
        assert nvidia == cuda
        seen.append(nvidia)
    assert len(set(seen)) == 2
    assert all(index in {"0", "1", "2", "3"} for index in seen)


def test_in_cluster_service_account_lists_its_own_pod_with_a_bound_token(
    pods: Pods, core_v1: Any, k8s_client: Any, kubectl: Kubectl, namespace: str
) -> None:
    from kubernetes import client

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
        "import json, os\n"
        "from kubernetes import client, config\n"
        "config.load_incluster_config()\n"
        "namespace = open('/var/run/secrets/kubernetes.io/serviceaccount/namespace').read()\n"
        "listed = client.CoreV1Api().list_namespaced_pod(namespace).items\n"
        "names = [p.metadata.name for p in listed]\n"
        "token = open('/var/run/secrets/kubernetes.io/serviceaccount/token').read()\n"
        "print(json.dumps({'names': names, 'token': token}))\n"
    )
    pods.create(pod_manifest("incluster", ["python", "-c", program]))
    pod = pods.wait_phase("incluster", "Succeeded", "Failed")
    log = kubectl("logs", "-n", namespace, "incluster").stdout
    assert pod["status"]["phase"] == "Succeeded", log
    result = json.loads(log)
    assert "incluster" in result["names"]
    payload = result["token"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    bound = claims["kubernetes.io"]
    assert bound["namespace"] == namespace
    assert bound["serviceaccount"]["name"] == "default"
    assert bound["pod"] == {"name": "incluster", "uid": pod["metadata"]["uid"]}


def test_deleting_an_owner_garbage_collects_its_dependents(
    pods: Pods, core_v1: Any, namespace: str
) -> None:
    owner = core_v1.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    core_v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [reference]}}
    )
    manifest = pod_manifest("dependent-pod", ["sleep", "3600"], terminationGracePeriodSeconds=1)
    manifest["metadata"]["ownerReferences"] = [reference]
    pods.create(manifest)
    pods.wait_running("dependent-pod")
    core_v1.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def remaining() -> list[str]:
        config_maps = [c.metadata.name for c in core_v1.list_namespaced_config_map(namespace).items]
        pod_names = [p.metadata.name for p in core_v1.list_namespaced_pod(namespace).items]
        return [n for n in config_maps + pod_names if n in ("dependent", "dependent-pod")]

    deadline = time.monotonic() + 60
    while remaining():
        assert time.monotonic() < deadline, f"not garbage-collected: {remaining()}"
        time.sleep(0.3)


def test_deployment_runs_its_pod_through_the_controllers(
    k8s_client: Any, pods: Pods, namespace: str
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(k8s_client)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container("main", ["sleep", "3600"])]},
                },
            },
        },
    )
    deadline = time.monotonic() + 60
    while (apps.read_namespaced_deployment("web", namespace).status.available_replicas or 0) < 1:
        assert time.monotonic() < deadline, "the deployment never became available"
        time.sleep(0.3)
    pod_list = pods.core_v1.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pod_list) == 1
    assert pod_list[0].status.phase == "Running"
    assert container_status(pods.get(pod_list[0].metadata.name))["ready"] is True
