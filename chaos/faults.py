"""The faults the harness injects: what each one does, and when (a seeded schedule).

- operator-kill: SIGKILL, then the operator starts again a moment later, as a Deployment
  brings back a crashed pod.
- operator-pause: SIGSTOP for 30-60 s, then SIGCONT: the operator sees nothing and writes
  nothing while the cluster moves on, then wakes with stale watches and stale caches, as
  an operator partitioned from the API server does.
- apiserver-restart, etcd-restart: SIGKILL, then the same binary on the same ports and data
  a few seconds later, as the kubelet restarts a crashed static pod.
- kubelet-restart, containerd-restart: SIGKILL of the node's kubelet or containerd; the
  node's init starts it again a second later, as systemd would. Containers keep running.
- node-loss: the node dies with its containers, as a machine losing its power, and boots
  again 50-60 s later with the same name and disk. Meanwhile the node lifecycle controller
  finds it unreachable (after the grace period the run gives it, NODE_GRACE_SECONDS),
  taints it, and the pods, which tolerate that for a few seconds only (chaos.workload),
  are evicted: their jobs must restart them, and say why.

Faults never overlap: each starts once the one before has ended and the cluster has had a
quiet gap, so that the time a job takes to settle can be put down to one fault.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final, Protocol

from tfjob_localcluster.cluster import LocalCluster


class FaultKind(StrEnum):
    OPERATOR_KILL = "operator-kill"
    OPERATOR_PAUSE = "operator-pause"
    APISERVER_RESTART = "apiserver-restart"
    ETCD_RESTART = "etcd-restart"
    KUBELET_RESTART = "kubelet-restart"
    CONTAINERD_RESTART = "containerd-restart"
    NODE_LOSS = "node-loss"


#: How long the node lifecycle controller waits for a silent node before it finds it
#: unreachable (--node-monitor-grace-period; Kubernetes' default is 50 s). Above the
#: longest API server outage the run makes plus a kubelet's lease renewal interval (10 s),
#: so that only a lost node is ever found unreachable.
NODE_GRACE_SECONDS: Final = 30


#: How long each kind keeps its target down (paused, or dead before its restart), seconds;
#: the node's init restarts its components after a delay of its own.
DOWN_SECONDS: Final = {
    FaultKind.OPERATOR_KILL: (0.5, 3.0),
    FaultKind.OPERATOR_PAUSE: (30.0, 60.0),
    FaultKind.APISERVER_RESTART: (1.0, 8.0),
    FaultKind.ETCD_RESTART: (1.0, 8.0),
    FaultKind.KUBELET_RESTART: (0.0, 0.0),
    FaultKind.CONTAINERD_RESTART: (0.0, 0.0),
    # Past the grace period, the controller's next look (every 5 s), the pods' toleration
    # and the eviction itself: a node back any sooner keeps its pods.
    FaultKind.NODE_LOSS: (NODE_GRACE_SECONDS + 20.0, NODE_GRACE_SECONDS + 30.0),
}
#: The control-plane component each restart kind kills.
CONTROL_PLANE: Final = {
    FaultKind.APISERVER_RESTART: "kube-apiserver",
    FaultKind.ETCD_RESTART: "etcd",
}
#: The node component each restart kind kills.
NODE: Final = {
    FaultKind.KUBELET_RESTART: "kubelet",
    FaultKind.CONTAINERD_RESTART: "containerd",
}


@dataclass(frozen=True)
class PlannedFault:
    kind: FaultKind
    #: Quiet seconds between the end of the fault before (or the start) and this one.
    gap: float
    down: float


@dataclass(frozen=True)
class Fault:
    """A fault as it happened, in seconds since the run's start."""

    kind: FaultKind
    began: float
    #: When the target was back: restarted and answering, or resumed.
    ended: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def schedule(per_kind: int, gap: tuple[float, float], seed: int) -> list[PlannedFault]:
    """`per_kind` faults of every kind in a random order, each after a random quiet gap."""
    rng = random.Random(seed)
    kinds = [kind for kind in FaultKind for _ in range(per_kind)]
    rng.shuffle(kinds)
    return [
        PlannedFault(kind, round(rng.uniform(*gap), 1), round(rng.uniform(*DOWN_SECONDS[kind]), 1))
        for kind in kinds
    ]


class Operator(Protocol):
    """What the injector needs of the operator's process."""

    def kill(self) -> None: ...
    def start(self) -> None: ...
    def pid(self) -> int: ...


class Injector:
    """Carries out planned faults against one operator and one local cluster."""

    def __init__(self, operator: Operator, cluster: LocalCluster) -> None:
        if cluster.control_plane is None:
            raise ValueError("the cluster is not running")
        self.operator = operator
        self.cluster = cluster
        self.control_plane = cluster.control_plane

    def inject(self, fault: PlannedFault, clock: float) -> Fault:
        """Does `fault` now; returns when its target is back. `clock` is the run's start
        (time.monotonic())."""
        began = time.monotonic() - clock
        if fault.kind is FaultKind.OPERATOR_KILL:
            self.operator.kill()
            time.sleep(fault.down)
            self.operator.start()
        elif fault.kind is FaultKind.OPERATOR_PAUSE:
            group = self.operator.pid()
            os.killpg(group, signal.SIGSTOP)
            try:
                time.sleep(fault.down)
            finally:
                os.killpg(group, signal.SIGCONT)
        elif fault.kind in CONTROL_PLANE:
            self.control_plane.restart(CONTROL_PLANE[fault.kind], down_seconds=fault.down)
        elif fault.kind is FaultKind.NODE_LOSS:
            self.cluster.lose_node(fault.down)
        else:
            self.cluster.restart_node_component(NODE[fault.kind])
        return Fault(fault.kind, round(began, 2), round(time.monotonic() - clock, 2))
