"""Networking, Service DNS (CoreDNS) and the controllers of the local cluster."""

from __future__ import annotations

from typing import Any

import pytest
from support.cluster import Kubectl
from support.pods import (
    PEER_PROGRAM,
    Pods,
    container,
    container_status,
    headless_service,
    pod_manifest,
)
from support.waiting import wait_until

from tfjob_localcluster.images.catalog import TRAINER

pytestmark = pytest.mark.integration


def test_pods_reach_each_other_on_2222_by_service_dns_names(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str, project_images: tuple[str, ...]
) -> None:
    for name, peer in (("alpha", "beta"), ("beta", "alpha")):
        core_v1.create_namespaced_service(namespace, headless_service(name, {"peer": name}))
        names = [peer, f"{peer}.{namespace}.svc", f"{peer}.{namespace}.svc.cluster.local"]
        pods.create(
            pod_manifest(
                name,
                ["python", "-c", PEER_PROGRAM, "3", *names],
                image=TRAINER,
                labels={"peer": name},
            )
        )
    for name, peer in (("alpha", "beta"), ("beta", "alpha")):
        pod = pods.wait_phase(name, "Succeeded", "Failed")
        log = kubectl("logs", "-n", namespace, name).stdout
        assert pod["status"]["phase"] == "Succeeded", log
        assert log.splitlines() == [
            f"{peer} -> {peer}",
            f"{peer}.{namespace}.svc -> {peer}",
            f"{peer}.{namespace}.svc.cluster.local -> {peer}",
        ]


def test_pod_hostname_and_subdomain_resolve_like_kubernetes_dns(
    pods: Pods, core_v1: Any, kubectl: Kubectl, namespace: str, project_images: tuple[str, ...]
) -> None:
    core_v1.create_namespaced_service(namespace, headless_service("workers", {"job": "j"}))
    pods.create(
        pod_manifest(
            "server",
            containers=[
                container(
                    "main",
                    ["python", "-c", PEER_PROGRAM, "2"],
                    TRAINER,
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
        pod_manifest(
            "client", ["python", "-c", PEER_PROGRAM, "0", fqdn, "worker-0.workers"], image=TRAINER
        )
    )
    pod = pods.wait_phase("client", "Succeeded", "Failed")
    log = kubectl("logs", "-n", namespace, "client").stdout
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.splitlines() == [f"{fqdn} -> worker-0", "worker-0.workers -> worker-0"]
    assert pods.wait_phase("server", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"


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

    wait_until(
        remaining,
        60,
        lambda left: f"the garbage collector to delete {left}",
        until=lambda left: not left,
        interval=0.3,
    )


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
    wait_until(
        lambda: apps.read_namespaced_deployment("web", namespace).status.available_replicas,
        60,
        "the deployment to be available",
        interval=0.3,
    )
    pod_list = pods.core_v1.list_namespaced_pod(namespace, label_selector="app=web").items
    assert len(pod_list) == 1
    assert pod_list[0].status.phase == "Running"
    assert container_status(pods.get(pod_list[0].metadata.name))["ready"] is True
