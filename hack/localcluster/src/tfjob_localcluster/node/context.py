"""What every pod worker of a node shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfjob_localcluster.node.config import NodeConfig
from tfjob_localcluster.node.dns import ClusterDns
from tfjob_localcluster.node.events import EventRecorder
from tfjob_localcluster.node.gpus import GpuAllocator
from tfjob_localcluster.node.kube import Kube
from tfjob_localcluster.node.sandbox import SandboxManager


@dataclass
class NodeContext:
    config: NodeConfig
    kube: Kube
    events: EventRecorder
    gpus: GpuAllocator
    sandboxes: SandboxManager
    dns: ClusterDns
    host_ip: str
    pods_dir: Path
    # Records a container's process group for the sweep after a crash of the node.
    record_process: Callable[[int], None]
