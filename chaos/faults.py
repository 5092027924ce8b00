"""The faults the harness injects: what each one does, and when (a seeded schedule).

Two operators run, electing a leader on a Lease as the chart's two replicas do
(chaos.operators); the first four faults hit them:

- operator-kill: SIGKILL to every operator, then they start again a moment later, as a
  Deployment brings back crashed pods; the one that takes the Lease (once it expires) leads.
- operator-pause: SIGSTOP to every operator for 30-60 s, then SIGCONT: no operator sees or
  writes anything while the cluster moves on; they wake with stale watches and caches,
  the leader past its renew deadline (it stops leading and exits), as operators
  partitioned from the API server do.
- leader-kill: SIGKILL to the leader, with a standby running; its pod is gone, and a new
  candidate (a new pod, a new name) starts a moment later.
- leader-pause: SIGSTOP to the leader for longer than its lease, then SIGCONT: the standby
  has taken over meanwhile; the old leader, awake, must write nothing more, and exits.
- leader-node-loss: the leader's node is lost: the leader freezes, never to wake
  (SIGSTOP), its connections silent; after 20-30 s its pod is gone (SIGKILL) and a new
  candidate starts in its place.
- rolling-update: the Deployment rolls: each operator in turn is replaced by a new one,
  the new one ready first (maxSurge 1, maxUnavailable 0), the old one stopped by SIGTERM
  (a leader gives its Lease up).
- apiserver-restart, etcd-restart: SIGKILL, then the same binary on the same ports and data
  a few seconds later, as the kubelet restarts a crashed static pod.
- kubelet-restart, containerd-restart: SIGKILL of the node's kubelet or containerd; the
  node's init starts it again a second later, as systemd would. Containers keep running.
- node-loss: the node dies with its containers, as a machine losing its power, and boots
  again 50-60 s later with the same name and disk. Meanwhile the node lifecycle controller
  finds it unreachable (after the grace period the run gives it, NODE_GRACE_SECONDS),
  taints it, and the pods, which tolerate that for a few seconds only (chaos.workload),
  are evicted: their jobs must restart them, and say why.
- apiserver-throttle: for 20-40 s the API server's Priority and Fairness gives the
  operators a tiny share and rejects their excess with 429 and `Retry-After`
  (chaos.throttle).
- watch-expiry: etcd's history is compacted to its current revision and the API server
  restarted, as a rolling upgrade after etcd's periodic compaction: every watch resuming
  from an older version gets 410 Gone and must list again.
- apiserver-latency: for 20-40 s every answer of the API server reaches the operators
  2-8 s late (chaos.proxies).
- leader-partition: the leader alone is cut from the API server for longer than its lease,
  its connections half-open (chaos.proxies): the standby takes over; the old leader must
  write nothing more, and exits when it finds it could not renew.
- clock-skew: the standby is replaced by a candidate whose wall clock runs 3 minutes
  ahead (chaos.clocks), and the leader is killed: the skewed one takes over, and leads
  until a later fault replaces it.

Faults never overlap: each starts once the one before has ended and the cluster has had a
quiet gap, so that the time a job takes to settle can be put down to one fault.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final


class FaultKind(StrEnum):
    OPERATOR_KILL = "operator-kill"
    OPERATOR_PAUSE = "operator-pause"
    LEADER_KILL = "leader-kill"
    LEADER_PAUSE = "leader-pause"
    LEADER_NODE_LOSS = "leader-node-loss"
    ROLLING_UPDATE = "rolling-update"
    APISERVER_RESTART = "apiserver-restart"
    ETCD_RESTART = "etcd-restart"
    KUBELET_RESTART = "kubelet-restart"
    CONTAINERD_RESTART = "containerd-restart"
    NODE_LOSS = "node-loss"
    APISERVER_THROTTLE = "apiserver-throttle"
    WATCH_EXPIRY = "watch-expiry"
    APISERVER_LATENCY = "apiserver-latency"
    LEADER_PARTITION = "leader-partition"
    CLOCK_SKEW = "clock-skew"


#: How long the node lifecycle controller waits for a silent node before it finds it
#: unreachable (--node-monitor-grace-period; Kubernetes' default is 50 s). Above the
#: longest API server outage the run makes (8 s down, then up to 15 s before a loaded
#: machine's API server serves again), the kubelet's back-off between lease tries (at
#: most 7 s) and its lease renewal interval (10 s), so that only a lost node is ever found
#: unreachable: with 30 s, a kubelet that had renewed 10 s before an API server restart of
#: 7 s, which then took 11 s to serve, was found unreachable and its pods evicted.
NODE_GRACE_SECONDS: Final = 45


#: How long each kind keeps its target down (paused, or dead before its restart), seconds;
#: the node's init restarts its components after a delay of its own.
DOWN_SECONDS: Final = {
    FaultKind.OPERATOR_KILL: (0.5, 3.0),
    FaultKind.OPERATOR_PAUSE: (30.0, 60.0),
    FaultKind.LEADER_KILL: (0.5, 3.0),
    # Past the lease (15 s) as the standby observes it, and its next try.
    FaultKind.LEADER_PAUSE: (20.0, 30.0),
    FaultKind.LEADER_NODE_LOSS: (20.0, 30.0),
    FaultKind.ROLLING_UPDATE: (0.0, 0.0),
    FaultKind.APISERVER_RESTART: (1.0, 8.0),
    FaultKind.ETCD_RESTART: (1.0, 8.0),
    FaultKind.KUBELET_RESTART: (0.0, 0.0),
    FaultKind.CONTAINERD_RESTART: (0.0, 0.0),
    # Past the grace period, the controller's next look (every 5 s), the pods' toleration
    # and the eviction itself: a node back any sooner keeps its pods.
    FaultKind.NODE_LOSS: (NODE_GRACE_SECONDS + 20.0, NODE_GRACE_SECONDS + 30.0),
    # Longer than the leader's renew deadline (10 s): its renewals are throttled too.
    FaultKind.APISERVER_THROTTLE: (20.0, 40.0),
    # The API server's restart after etcd's compaction.
    FaultKind.WATCH_EXPIRY: (1.0, 3.0),
    FaultKind.APISERVER_LATENCY: (20.0, 40.0),
    # Past the lease (15 s) as the standby observes it, and its next try.
    FaultKind.LEADER_PARTITION: (20.0, 30.0),
    # The old leader killed, before its successor starts.
    FaultKind.CLOCK_SKEW: (0.5, 3.0),
}
#: The control-plane component each restart kind kills.
CONTROL_PLANE: Final = {
    FaultKind.APISERVER_RESTART: "kube-apiserver",
    FaultKind.ETCD_RESTART: "etcd",
}
#: The faults that restart the API server.
RESTARTS_APISERVER: Final = frozenset({FaultKind.APISERVER_RESTART, FaultKind.WATCH_EXPIRY})
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


#: The faults after which a standby takes the Lease from a leader that is gone.
TAKEOVERS: Final = frozenset(
    {
        FaultKind.LEADER_KILL,
        FaultKind.LEADER_PAUSE,
        FaultKind.LEADER_NODE_LOSS,
        FaultKind.ROLLING_UPDATE,
        FaultKind.LEADER_PARTITION,
        FaultKind.CLOCK_SKEW,
    }
)


@dataclass(frozen=True)
class Fault:
    """A fault as it happened, in seconds since the run's start."""

    kind: FaultKind
    began: float
    #: When the target was back: restarted and answering, or resumed.
    ended: float
    #: For a takeover: the leader that went, and when (epoch seconds, the audit log's
    #: clock): killed, frozen, or sent SIGTERM.
    leader: str = ""
    leader_gone: float | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def planned_seconds(planned: Sequence[PlannedFault]) -> float:
    """How long a schedule runs at least: its quiet gaps and its downs. A fault that takes
    the leader away lasts until another candidate leads, a restart until its target answers:
    the run takes longer."""
    return sum(fault.gap + fault.down for fault in planned)


def schedule(per_kind: int, gap: tuple[float, float], seed: int) -> list[PlannedFault]:
    """`per_kind` faults of every kind in a random order, each after a random quiet gap."""
    rng = random.Random(seed)
    kinds = [kind for kind in FaultKind for _ in range(per_kind)]
    rng.shuffle(kinds)
    return [
        PlannedFault(kind, round(rng.uniform(*gap), 1), round(rng.uniform(*DOWN_SECONDS[kind]), 1))
        for kind in kinds
    ]
