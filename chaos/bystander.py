"""A second node, simulated by kwok, on which no pod of the run is ever placed.

With one node, losing it is losing every node, and the node lifecycle controller then
takes the silence for its own network failing ("master disruption mode"): it evicts
nothing. A cluster that loses one of its nodes evicts that node's pods. The bystander,
kept Ready by kwok and tainted so that nothing is scheduled on it, makes the local cluster
such a cluster.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, Final

from harness import kwok
from tfjob_localcluster import binaries
from tfjob_localcluster.host.procs import ManagedProcess
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

NAME: Final = f"{kwok.NODE_PREFIX}bystander"
TAINT: Final = {"key": "tfjob.dev/chaos-bystander", "effect": "NoSchedule"}
KWOK_USER: Final = "tfjob-chaos:kwok"
READY_SECONDS: Final = 60


class BystanderError(RuntimeError):
    pass


def node() -> dict[str, Any]:
    """kwok's first node, renamed, with a taint no pod of the run tolerates."""
    body = kwok.node(0)
    body["metadata"]["name"] = NAME
    body["metadata"]["labels"]["kubernetes.io/hostname"] = NAME
    body["spec"]["taints"] = [TAINT]
    return body


class Bystander:
    """kwok and its one node, beside a running local cluster."""

    def __init__(self, cluster: LocalCluster, state_dir: Path) -> None:
        if cluster.control_plane is None:
            raise BystanderError("the cluster is not running")
        self.plane = cluster.control_plane
        self.state_dir = state_dir
        self.kwok = binaries.locate("kwok").kwok
        self.process: ManagedProcess | None = None

    def __enter__(self) -> Bystander:
        self.process = kwok.start(self.plane, self.kwok, self.state_dir, KWOK_USER)
        rest = self.plane.rest()
        rest.create_or_replace("/api/v1/nodes", node())
        self.process.wait_ready(
            lambda: _ready(rest), READY_SECONDS, BystanderError, what=f"node {NAME} Ready"
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.process is not None:
            self.process.stop(grace=5)


def _ready(rest: Rest) -> bool:
    try:
        return kwok.ready(rest.request("GET", f"/api/v1/nodes/{NAME}"))
    except (ApiError, OSError):
        return False
