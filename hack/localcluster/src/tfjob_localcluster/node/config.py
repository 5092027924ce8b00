"""The process node's configuration (written by the launcher as JSON, read by the node)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tfjob_localcluster.node.podspec import DEFAULT_ENTRYPOINTS, GPU_RESOURCE
from tfjob_localcluster.node.quantity import parse_quantity

DEFAULT_CAPACITY = {
    "cpu": "32",
    "memory": "128Gi",
    "pods": "110",
    "ephemeral-storage": "200Gi",
    GPU_RESOURCE: "4",
}


def python_bin_dir() -> str:
    """The bin directory of the running interpreter's environment (the project's venv)."""
    return str(Path(sys.executable).parent)


def image_paths() -> list[str]:
    """The host directories that play the image: the interpreter's installation, the
    project's environment, and the sources its editable installs point to.

    The smallest set of real paths that covers them (no path inside another).
    """
    candidates = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    candidates |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    ordered = sorted(candidates)
    kept: list[str] = []
    for path in ordered:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


@dataclass
class NodeConfig:
    node_name: str
    state_dir: str  # pods/ (volumes, logs, scratch) lives here
    kubeconfig: str  # the node's identity: system:node:<name>
    dns_kubeconfig: str  # the DNS watcher's identity
    slot: int  # registry slot: fixes the pod subnet and network name prefix
    subnet: str
    registry_dir: str
    api_host: str  # where pods reach the API server (the bridge gateway)
    api_port: int
    serving_cert: str
    serving_key: str
    client_ca: str
    kubelet_client_users: list[str]
    kubelet_version: str
    cluster_domain: str = "cluster.local"
    capacity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    entrypoints: dict[str, list[str]] = field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_ENTRYPOINTS.items()}
    )
    restart_backoff_initial: float = 10.0
    restart_backoff_max: float = 10.0
    python_bin_dir: str = field(default_factory=python_bin_dir)
    lease_seconds: int = 40
    heartbeat_seconds: float = 10.0

    def __post_init__(self) -> None:
        for resource, value in self.capacity.items():
            try:
                parse_quantity(value)
            except ValueError:
                raise ValueError(f"node capacity {resource}={value!r} is not a quantity") from None
        if self.restart_backoff_initial <= 0 or self.restart_backoff_max <= 0:
            raise ValueError("restart back-off durations must be positive")
        for image, entrypoint in self.entrypoints.items():
            if not entrypoint or not all(isinstance(part, str) for part in entrypoint):
                raise ValueError(f"entrypoint for image {image!r} must be a non-empty list")

    @property
    def gpu_count(self) -> int:
        return int(parse_quantity(self.capacity.get(GPU_RESOURCE, "0")))

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        data: dict[str, Any] = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown node settings {sorted(unknown)}")
        return cls(**data)
