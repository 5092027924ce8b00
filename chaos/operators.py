"""The operators under test: two candidates electing a leader on one Lease, as the chart
runs them, each a process of this checkout with a user of its own (so that the API
server's audit log tells their requests apart) allowed what the chart allows its
ServiceAccount (chaos.rbac).

Each reaches the API server through a proxy of its own (chaos.proxies), which the network
faults slow down or cut.

A candidate that exits by itself (a leader that lost its Lease exits, to come back as a
candidate) is started again under the same name, as the kubelet restarts a pod's
container; a candidate whose pod is gone (killed, its node lost) is succeeded by a new one
(a new pod: a new name), which cannot take over a Lease before it expires; a rolling
update replaces each candidate by a new one, the new one first.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chaos.clocks import remove_leftovers, skewed_environment
from chaos.proxies import Toxiproxy
from chaos.verdict import OperatorFigures
from harness.operator_process import (
    ERROR_LINE,
    OperatorCommand,
    OperatorProcess,
)
from harness.promtext import counters
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_localcluster.waiting import wait_until
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

#: The namespace of the Lease, as the chart's release namespace.
LEASE_NAMESPACE = "tfjob-system"
LEASE = "tfjob-operator"
#: Every candidate's certificate carries this group, which the audit policy records.
GROUP = "tfjob-operators"
#: What the controller logs when a reconcile fails (tfjob_operator.controller).
RECONCILE_FAILED = re.compile(r"reconcile of tfjob \S+ failed")
#: How much of each logged line the verdict keeps.
LOGGED_CHARACTERS = 400
READY_SECONDS = 60


class CandidateError(RuntimeError):
    pass


@dataclass
class Candidate:
    #: Its name, its user in the audit log, and the name of its proxy (chaos.proxies).
    identity: str
    process: OperatorProcess
    #: Seconds its wall clock runs ahead of the cluster's (chaos.clocks).
    skew: int = 0


@dataclass
class Candidates:
    cluster: LocalCluster
    rest: Rest
    state_dir: Path
    say: Callable[[str], None]
    #: Each candidate reaches the API server through a proxy of its own here.
    toxiproxy: Toxiproxy
    #: The candidates running now (or killed, until they start again).
    running: list[Candidate] = field(default_factory=list)
    #: Every candidate the run had, replaced ones too.
    every: list[Candidate] = field(default_factory=list)
    counted: Counter[str] = field(default_factory=Counter)
    starts: int = 0
    #: Exits candidates made by themselves (a leader that lost its Lease exits).
    exits: int = 0
    #: The processes of candidates whose clock was skewed (chaos.clocks), ended or not.
    skewed_pids: list[int] = field(default_factory=list)

    def start(self, count: int = 2) -> None:
        """`count` candidates, the first one started and ready before the others, so that
        it leads."""
        for _ in range(count):
            self.running.append(self._new())
            self._start(self.running[-1])

    def leader(self) -> Candidate | None:
        """The candidate the Lease names, if it is one of the running ones."""
        try:
            lease = self.rest.request(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE}",
            )
        except (ApiError, OSError):
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        return next((c for c in self.running if c.identity == holder), None)

    def wait_leader(self, timeout: float = 60, other_than: Candidate | None = None) -> Candidate:
        """The running candidate the Lease names (one other than `other_than`), once there
        is one."""

        def new_leader() -> Candidate | None:
            found = self.leader()
            return None if found is other_than else found

        return wait_until(
            new_leader,
            timeout,
            lambda: CandidateError(f"no candidate took the Lease in {timeout:g}s"),
            each=self.supervise,
            interval=0.2,
        )

    def supervise(self) -> None:
        """Starts again a candidate that exited by itself, as the kubelet would."""
        for candidate in self.running:
            if not candidate.process.process.running():
                self.exits += 1
                self.say(f"{candidate.identity} exited; starting it again")
                self._start(candidate)

    def kill(self, candidate: Candidate) -> None:
        """SIGKILL; it stays down until `restart`."""
        self._collect(candidate)
        candidate.process.process.kill()

    def restart(self, candidate: Candidate) -> None:
        """The same candidate again (a container restarted in its pod: the same name)."""
        self._start(candidate)

    def succeed(self, dead: Candidate) -> Candidate:
        """A new candidate in place of a dead one (its pod recreated: a new name)."""
        self.running.remove(dead)
        new = self._new()
        self._start(new)
        self.running.append(new)
        return new

    def replace(self, old: Candidate, skew: int = 0) -> Candidate:
        """A rolling update's step: a new candidate (its clock `skew` seconds ahead)
        started and ready, then the old one stopped (SIGTERM: a leader gives its Lease
        up)."""
        new = self._new(skew)
        self._start(new)
        self.running.append(new)
        self._collect(old)
        old.process.stop()
        self.running.remove(old)
        return new

    def stop(self) -> None:
        for candidate in self.running:
            self._collect(candidate)
            candidate.process.stop()
        remove_leftovers(self.skewed_pids)

    def figures(self) -> OperatorFigures:
        restarts: Counter[str] = Counter()
        for key, value in self.counted.items():
            if key.startswith("tfjob_operator_watch_restarts_total{"):
                cause = key.partition("cause=")[2].split(",")[0].rstrip("}")
                restarts[cause] += value
        lines = [line for c in self.every for line in c.process.log_lines()]
        return OperatorFigures(
            starts=self.starts,
            reconcile_errors=self.counted["tfjob_operator_reconcile_errors_total"],
            watch_restarts=dict(restarts),
            error_lines=[line[:LOGGED_CHARACTERS] for line in lines if ERROR_LINE.search(line)],
            reconcile_failures=[
                line[:LOGGED_CHARACTERS] for line in lines if RECONCILE_FAILED.search(line)
            ],
        )

    def _new(self, skew: int = 0) -> Candidate:
        identity = f"operator-{len(self.every) + 1}"
        assert self.cluster.control_plane is not None
        upstream = urllib.parse.urlsplit(self.cluster.control_plane.api_url).netloc
        listen = self.toxiproxy.proxy(identity, upstream)
        # The chart's roles, bound to the group (chaos.rbac): nothing more.
        kubeconfig = self.cluster.control_plane.client_kubeconfig(
            identity, identity, (GROUP,), server=f"https://{listen}"
        )
        command = OperatorCommand.checkout(
            "--leader-elect",
            f"--leader-election-namespace={LEASE_NAMESPACE}",
            f"--leader-election-id={LEASE}",
            f"--leader-election-identity={identity}",
        )
        log = self.state_dir / f"{identity}.log"
        env = skewed_environment(skew) if skew else None
        process = OperatorProcess(command, kubeconfig, log, user=identity, env=env)
        candidate = Candidate(identity, process, skew)
        self.every.append(candidate)
        return candidate

    def _start(self, candidate: Candidate) -> None:
        identity = candidate.process.start()
        self.starts += 1
        if candidate.skew and identity is not None:
            self.skewed_pids.append(identity.pid)
        candidate.process.wait_answers(READY_SECONDS)

    def _collect(self, candidate: Candidate) -> None:
        if candidate.process.process.running():
            self.counted.update(counters(candidate.process.metrics(), "tfjob_operator_"))
