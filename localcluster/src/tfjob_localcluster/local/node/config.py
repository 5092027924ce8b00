"""The node's settings: written by the launcher as JSON, read by the node's init process."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# Inside the node's own mount namespace these are private (see node/mounts.py), so every
# component keeps its standard paths and the host sees none of them.
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
KUBELET_DIR = "/var/lib/kubelet"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
INTERFACE = "eth0"


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    state_dir: str  # the node's own files: config, var-lib, var-log, tmp
    logs_dir: str  # one log file per component
    host_link: str  # the name of the veth end the launcher moves into the node
    node_address: str  # CIDR of the node's eth0, e.g. 10.212.0.2/24
    gateway: str  # the host's end of the link, where the API server listens
    pod_subnet: str
    cgroup_root: str  # the cgroup (in every hierarchy) holding this node's pods
    cluster_dns: str
    cluster_domain: str
    kubelet_kubeconfig: str
    kube_proxy_kubeconfig: str
    serving_cert: str
    serving_key: str
    client_ca: str
    kubelet: str
    kube_proxy: str
    gpu_device_plugin: str
    gpu_count: int
    sandbox_image: str
    runtime_binary: str  # runc, or the wrapper that drops CAP_SYS_RESOURCE
    keep_visible: list[str]  # host paths the node's private mounts must not hide

    @property
    def node_ip(self) -> str:
        return self.node_address.split("/")[0]

    def path(self, *parts: str) -> Path:
        return Path(self.state_dir, *parts)

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        data: dict[str, Any] = json.loads(path.read_text())
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{path}: unknown node settings {sorted(unknown)}")
        return cls(**data)
