"""The Node object and its heartbeat (the Lease in kube-node-lease, the Ready condition)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import platform
from pathlib import Path
from typing import Any

from tfjob_localcluster import __version__
from tfjob_localcluster.node.config import NodeConfig
from tfjob_localcluster.node.kube import ApiError, Kube
from tfjob_localcluster.node.status import now

Obj = dict[str, Any]
log = logging.getLogger(__name__)

STATUS_REPORT_SECONDS = 60.0
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


def micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read(path: str, default: str) -> str:
    try:
        return Path(path).read_text().strip() or default
    except OSError:
        return default


def _os_image() -> str:
    for line in _read("/etc/os-release", "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


def node_info(config: NodeConfig) -> Obj:
    machine_id = _read("/etc/machine-id", "0" * 32)
    return {
        "machineID": machine_id,
        "systemUUID": machine_id,
        "bootID": _read("/proc/sys/kernel/random/boot_id", ""),
        "kernelVersion": os.uname().release,
        "osImage": _os_image(),
        "containerRuntimeVersion": f"process-node://{__version__}",
        "kubeletVersion": config.kubelet_version,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": _ARCHITECTURES.get(platform.machine(), platform.machine()),
    }


def node_labels(config: NodeConfig) -> dict[str, str]:
    architecture = _ARCHITECTURES.get(platform.machine(), platform.machine())
    return {
        "kubernetes.io/hostname": config.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": architecture,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": architecture,
    }


def node_conditions(previous: list[Obj]) -> list[Obj]:
    """The four kubelet conditions, healthy; transition times kept from `previous`."""
    earlier = {c["type"]: c for c in previous}
    timestamp = now()
    wanted = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    conditions = []
    for kind, status, reason, message in wanted:
        old = earlier.get(kind)
        same = old is not None and old.get("status") == status
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": timestamp,
                "lastTransitionTime": old["lastTransitionTime"] if same and old else timestamp,
            }
        )
    return conditions


def node_status(config: NodeConfig, host_ip: str, port: int, previous: list[Obj]) -> Obj:
    return {
        "capacity": dict(config.capacity),
        "allocatable": dict(config.capacity),
        "conditions": node_conditions(previous),
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": config.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": node_info(config),
    }


class NodeHeartbeat:
    """Registers the Node, then renews its Lease and reports its status periodically."""

    def __init__(self, kube: Kube, config: NodeConfig, host_ip: str, port: int) -> None:
        self.kube = kube
        self.config = config
        self.host_ip = host_ip
        self.port = port
        self.node_uid = ""
        self._conditions: list[Obj] = []

    async def register(self) -> None:
        name = self.config.node_name
        labels = node_labels(self.config)
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {},
        }
        try:
            node = await self.kube.create("/api/v1/nodes", body)
        except ApiError as error:
            if error.status != 409:
                raise
            node = await self.kube.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
        self.node_uid = node["metadata"]["uid"]
        self._conditions = (node.get("status") or {}).get("conditions") or []
        await self.report_status()
        await self.renew_lease()

    async def report_status(self) -> None:
        status = node_status(self.config, self.host_ip, self.port, self._conditions)
        node = await self.kube.patch(
            f"/api/v1/nodes/{self.config.node_name}/status", {"status": status}
        )
        self._conditions = node["status"]["conditions"]

    async def renew_lease(self) -> None:
        name = self.config.node_name
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": self.config.lease_seconds,
            "renewTime": micro_time(),
        }
        try:
            await self.kube.patch(path, {"spec": spec})
        except ApiError as error:
            if error.status != 404:
                raise
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.node_uid}
                    ],
                },
                "spec": spec,
            }
            await self.kube.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
            )

    async def run(self) -> None:
        last_report = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            try:
                await self.renew_lease()
                if asyncio.get_running_loop().time() - last_report >= STATUS_REPORT_SECONDS:
                    await self.report_status()
                    last_report = asyncio.get_running_loop().time()
            except (ApiError, OSError) as error:
                log.warning("node heartbeat failed: %s", error)
