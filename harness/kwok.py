"""Simulated nodes: kwok plays the kubelet for Nodes that carry its annotation.

kwok runs no container. Without stages in its configuration it applies its built-in fast
ones: a scheduled pod becomes Running and Ready at once (with an IP from the node's
podCIDR), and a pod being deleted is removed at once. The benchmark's pods are owned by
TFJobs, not Jobs, so kwok's built-in completion stage never ends them: the harness ends
each job's leader itself, at a moment it records.

Heartbeats stay cheap: a Lease renewal per node (every 40 s lease, renewed at a fraction of
it) and a node status update every 20-45 s, for a handful of nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.host.procs import ManagedProcess
from tfjob_localcluster.local.controlplane import ControlPlane

NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_PREFIX = "kwok-node-"
#: Pods per node: room for the largest run on any one node, so placement never fails.
NODE_PODS = "10000"
LEASE_SECONDS = 40
#: Concurrent stage workers (kwok's default is 4): enough to keep up with the scheduler.
PLAY_PARALLELISM = 8


def configuration() -> dict[str, Any]:
    """A KwokConfiguration (also keeps kwok from reading ~/.kwok/kwok.yaml)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "podPlayStageParallelism": PLAY_PARALLELISM,
            "nodePlayStageParallelism": 2,
            "nodeLeaseDurationSeconds": LEASE_SECONDS,
        },
    }


def argv(binary: Path, kubeconfig: Path, config: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
        f"--node-lease-duration-seconds={LEASE_SECONDS}",
        # INFO logs a line per pod patch: thousands of lines, CPU the benchmark needs.
        "--v=WARN",
    ]


def node(index: int) -> dict[str, Any]:
    """A Node kwok manages; each has a /16 of its own for pod IPs."""
    if not 0 <= index < 64:
        raise ValueError(f"node index {index} out of range 0..63")
    resources = {"cpu": "1000", "memory": "4Ti", "pods": NODE_PODS}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"{NODE_PREFIX}{index}",
            "annotations": {NODE_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": f"{NODE_PREFIX}{index}"},
        },
        "spec": {"podCIDR": f"10.{128 + index}.0.0/16"},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def start(plane: ControlPlane, binary: Path, state_dir: Path, user: str) -> ManagedProcess:
    """kwok against a running control plane, as `user` (a cluster admin), logging beside it.

    Its configuration file is written into `state_dir`; the caller stops the process.
    """
    kubeconfig = plane.client_kubeconfig("kwok", user, ("system:masters",))
    config = state_dir / "kwok.yaml"
    config.write_text(yaml.safe_dump(configuration()))
    process = ManagedProcess("kwok", argv(binary, kubeconfig, config), plane.logs_dir / "kwok.log")
    process.start()
    return process


def ready(node_obj: dict[str, Any]) -> bool:
    """The Node's Ready condition is True."""
    conditions = (node_obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def schedulable(node_obj: dict[str, Any]) -> bool:
    """Ready and without the not-ready taint the API server puts on a new Node."""
    return ready(node_obj) and not (node_obj.get("spec") or {}).get("taints")
