"""Carries out the planned faults (chaos.faults) against the operators and the cluster."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from chaos.clocks import SKEW_SECONDS
from chaos.faults import CONTROL_PLANE, NODE, TAKEOVERS, Fault, FaultKind, PlannedFault
from chaos.operators import GROUP, Candidate, CandidateError, Candidates
from chaos.proxies import latency, partition
from chaos.throttle import throttled
from tfjob_localcluster.local.cluster import LocalCluster


class Injector:
    """Carries out planned faults against the operators and one local cluster."""

    def __init__(self, operators: Candidates, cluster: LocalCluster) -> None:
        if cluster.control_plane is None:
            raise ValueError("the cluster is not running")
        self.operators = operators
        self.cluster = cluster
        self.control_plane = cluster.control_plane

    def inject(self, fault: PlannedFault, clock: float) -> Fault:
        """Does `fault` now; returns when its target is back. `clock` is the run's start
        (time.monotonic())."""
        began = time.monotonic() - clock
        if fault.kind in TAKEOVERS:
            leader, gone = self._takeover(fault)
            ended = round(time.monotonic() - clock, 2)
            return Fault(fault.kind, round(began, 2), ended, leader.identity, gone)
        if fault.kind is FaultKind.OPERATOR_KILL:
            running = list(self.operators.running)
            for candidate in running:
                self.operators.kill(candidate)
            time.sleep(fault.down)
            for candidate in running:
                self.operators.restart(candidate)
        elif fault.kind is FaultKind.OPERATOR_PAUSE:
            groups = [c.process.process.pid for c in self.operators.running]
            _signal(groups, signal.SIGSTOP)
            try:
                time.sleep(fault.down)
            finally:
                _signal(groups, signal.SIGCONT)
        elif fault.kind is FaultKind.APISERVER_LATENCY:
            names = [c.identity for c in self.operators.running]
            with latency(self.operators.toxiproxy, names):
                time.sleep(fault.down)
        elif fault.kind is FaultKind.APISERVER_THROTTLE:
            with throttled(self.operators.rest, GROUP):
                time.sleep(fault.down)
        elif fault.kind is FaultKind.WATCH_EXPIRY:
            self.control_plane.compact_etcd()
            self.control_plane.restart("kube-apiserver", down_seconds=fault.down)
        elif fault.kind in CONTROL_PLANE:
            self.control_plane.restart(CONTROL_PLANE[fault.kind], down_seconds=fault.down)
        elif fault.kind is FaultKind.NODE_LOSS:
            self.cluster.lose_node(fault.down)
        else:
            self.cluster.restart_node_component(NODE[fault.kind])
        return Fault(fault.kind, round(began, 2), round(time.monotonic() - clock, 2))

    def _takeover(self, fault: PlannedFault) -> tuple[Candidate, float]:
        """A fault that takes the leader away; returns it and when it went."""
        leader = self.operators.wait_leader()
        group = [leader.process.process.pid]
        gone = time.time()
        if fault.kind is FaultKind.LEADER_KILL:
            self.operators.kill(leader)
            time.sleep(fault.down)
            self.operators.succeed(leader)
        elif fault.kind is FaultKind.LEADER_PAUSE:
            _signal(group, signal.SIGSTOP)
            try:
                time.sleep(fault.down)
            finally:
                _signal(group, signal.SIGCONT)
        elif fault.kind is FaultKind.CLOCK_SKEW:
            for standby in [c for c in self.operators.running if c is not leader]:
                self.operators.replace(standby, skew=SKEW_SECONDS)
            gone = time.time()
            self.operators.kill(leader)
            time.sleep(fault.down)
            self.operators.succeed(leader)
        elif fault.kind is FaultKind.LEADER_PARTITION:
            with partition(self.operators.toxiproxy, leader.identity):
                time.sleep(fault.down)
        elif fault.kind is FaultKind.LEADER_NODE_LOSS:
            _signal(group, signal.SIGSTOP)
            time.sleep(fault.down)
            self.operators.kill(leader)  # SIGKILL ends a stopped process too
            self.operators.succeed(leader)
        else:
            for candidate in list(self.operators.running):
                if candidate is leader:
                    gone = time.time()
                self.operators.replace(candidate)
        # The fault lasts until another candidate leads: the next one never delays the
        # takeover this one caused. None taking over is the verdict's to say (takeovers).
        with contextlib.suppress(CandidateError):
            self.operators.wait_leader(other_than=leader)
        return leader, gone


def _signal(groups: list[int | None], signum: int) -> None:
    for group in groups:
        if group is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signum)
