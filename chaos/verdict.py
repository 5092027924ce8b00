"""The checks: what the journal shows against what the jobs' replicas imply. Pure.

- every job ends in the state its leader's script implies, with the restartCount of the
  retryable failures it was given (`JobResult`);
- a terminal state, once shown, is never shown otherwise later (`lost_terminal_states`);
- no pod is created for a replica after a pod of it succeeded (`reruns_after_success`); a
  pod that ends while the API server is already deleting it for a disruption (a lost node's
  taint, an eviction) was lost to its job before it ended, and its job restarted without it:
  its late exit 0 is not a replica's success;
- no replica has two pods of one generation (`duplicate_pods`): two live pods of one
  replica, or a replica re-created within its generation;
- pods are evicted only while a node is lost (`evictions_without_node_loss`), and a job
  whose pods were evicted says so in its Restarting condition (`JobResult.explained`);
- nothing is left once the jobs are deleted (`leftovers`, listed by the harness);
- from the API server's audit log: after each fault that takes the leader away, a standby
  takes the Lease (`Takeover`: how long after, and after how long it wrote for a job), and
  no operator writes for a job while another holds the Lease (`deposed_writes`); the
  operators, allowed only what the chart's roles allow (chaos.rbac), are refused nothing
  (`forbidden`, 403s); what the API server throttled (`throttled`, 429s) is counted;
- and how many jobs each fault met under way (`jobs_under_way`): a fault that met none
  shows only what it did to the operators.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from chaos.faults import RESTARTS_APISERVER, Fault, FaultKind
from chaos.journal import Seen
from chaos.workload import ChaosJob
from harness.audit import FINAL_STAGES, Request

TERMINAL: Final = ("Succeeded", "Failed")
POD_ENDED: Final = ("Succeeded", "Failed")


#: Seconds after a restarted API server is ready during which it may still refuse what
#: the roles allow (`_apiserver_starting`).
STARTING_SECONDS: Final = 2.0
#: The exit code of a container its runtime could not start (the kubelet's StartError).
START_ERROR_EXIT: Final = 128


@dataclass(frozen=True)
class JobResult:
    name: str
    outcome: str
    expected_state: str
    state: str
    expected_restarts: int
    restarts: int
    #: The generations of its pods a lost node took (chaos.workload.ChaosJob.expected_restarts).
    evicted_generations: list[int]
    #: The generations in which a pod of it could not start (START_ERROR_EXIT), each a
    #: failure the job must retry as well.
    unstarted_generations: list[int]
    #: Whether its Restarting condition named the eviction (None: nothing was evicted).
    explained: bool | None
    #: When it first showed its expected state (seconds since the run's start).
    settled_at: float | None
    #: Seconds from its leader's last exit (its container's exit code shown) to its
    #: terminal state shown, both as watched; None if either was not seen.
    lag: float | None
    #: The faults under way between the two.
    faults_during_lag: list[str]

    @property
    def ok(self) -> bool:
        expected = (self.expected_state, self.expected_restarts)
        return (self.state, self.restarts) == expected and self.explained is not False


@dataclass(frozen=True)
class OperatorFigures:
    """The operator's own account, summed over its incarnations."""

    starts: int
    reconcile_errors: float
    #: tfjob_operator_watch_restarts_total by cause (resume, relist, error).
    watch_restarts: dict[str, float]
    #: Their logs' error lines and their reconciles' failures, as logged (cut to
    #: chaos.operators.LOGGED_CHARACTERS): the JSON keeps them, a passing run keeps no logs.
    error_lines: list[str]
    reconcile_failures: list[str]


@dataclass(frozen=True)
class Takeover:
    """What followed a fault that took the leader away, read from the audit log."""

    kind: str
    old: str
    #: The candidate that took the Lease next, if one did.
    new: str | None
    #: Seconds from the leader gone to the new leader's taking the Lease, and to its first
    #: write for a job (anything but the Lease and events).
    lease_taken: float | None
    first_write: float | None


@dataclass(frozen=True)
class Verdict:
    jobs: list[JobResult]
    lost_terminal_states: list[dict[str, Any]]
    reruns_after_success: list[dict[str, Any]]
    duplicate_pods: list[dict[str, Any]]
    evictions_without_node_loss: list[dict[str, Any]]
    leftovers: dict[str, list[str]]
    faults: list[Fault]
    operator: OperatorFigures
    #: The harness's own watches: outages outlasted and relists, per resource.
    coverage: dict[str, dict[str, int]]
    wall_seconds: float
    takeovers: list[Takeover]
    #: Writes for a job by an operator after another took the Lease from it.
    deposed_writes: list[dict[str, Any]]
    #: The operators' requests the API server answered 403: the chart's roles lack them.
    forbidden: list[dict[str, Any]]
    #: The operators' requests the API server answered 429, by kind (`create pods`).
    throttled: dict[str, int]
    #: Per fault, in order: how many jobs were under way while it lasted (`jobs_under_way`).
    jobs_met: list[int]

    @property
    def wrong_jobs(self) -> list[JobResult]:
        return [job for job in self.jobs if not job.ok]

    @property
    def ok(self) -> bool:
        return not (
            self.wrong_jobs
            or self.lost_terminal_states
            or self.reruns_after_success
            or self.duplicate_pods
            or self.evictions_without_node_loss
            or any(self.leftovers.values())
            or self.deposed_writes
            or self.forbidden
            or any(t.new is None for t in self.takeovers)
        )

    def fault_counts(self) -> dict[str, int]:
        return {kind.value: sum(f.kind is kind for f in self.faults) for kind in FaultKind}

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "wall_seconds": self.wall_seconds,
            "fault_counts": self.fault_counts(),
            "faults": [f.as_json() for f in self.faults],
            "jobs": [{**asdict(job), "ok": job.ok} for job in self.jobs],
            "wrong_jobs": [job.name for job in self.wrong_jobs],
            "lost_terminal_states": self.lost_terminal_states,
            "reruns_after_success": self.reruns_after_success,
            "duplicate_pods": self.duplicate_pods,
            "evictions_without_node_loss": self.evictions_without_node_loss,
            "leftovers": self.leftovers,
            "operator": asdict(self.operator),
            "coverage": self.coverage,
            "takeovers": [asdict(t) for t in self.takeovers],
            "deposed_writes": self.deposed_writes,
            "forbidden": self.forbidden,
            "throttled": self.throttled,
            "jobs_met": self.jobs_met,
        }

    def table(self) -> str:
        lags = [job.lag for job in self.jobs if job.lag is not None]
        slowest = max(
            (job for job in self.jobs if job.lag is not None),
            key=lambda job: job.lag or 0.0,
            default=None,
        )
        counts = ", ".join(f"{kind} {n}" for kind, n in self.fault_counts().items())
        by_outcome: dict[str, int] = defaultdict(int)
        for job in self.jobs:
            by_outcome[job.outcome] += 1
        rows = [
            ("faults", f"{counts}; {self.wall_seconds:.0f} s of wall time"),
            ("jobs", ", ".join(f"{n} {outcome}" for outcome, n in by_outcome.items())),
            ("faults that met a job under way", self._met_row()),
            ("jobs not in their expected state", _names(j.name for j in self.wrong_jobs)),
            ("terminal states lost", _count(self.lost_terminal_states)),
            ("pods re-run after success", _count(self.reruns_after_success)),
            ("duplicate pods (replica, generation)", _count(self.duplicate_pods)),
            (
                "restartCount not as injected",
                _names(j.name for j in self.jobs if j.restarts != j.expected_restarts),
            ),
            (
                "jobs restarted by a lost node",
                f"{sum(bool(j.evicted_generations) for j in self.jobs)}, not saying why: "
                + _names(j.name for j in self.jobs if j.explained is False),
            ),
            (
                "jobs restarted for pods that could not start",
                str(sum(bool(j.unstarted_generations) for j in self.jobs)),
            ),
            ("evictions with no node lost", _count(self.evictions_without_node_loss)),
            (
                "left after deletion",
                ", ".join(f"{len(v)} {k}" for k, v in self.leftovers.items()),
            ),
        ]
        if lags:
            assert slowest is not None
            during = ", ".join(slowest.faults_during_lag) or "no fault"
            rows.append(
                (
                    "leader exit → job state",
                    f"p50 {statistics.median(lags):.1f} s, max {max(lags):.1f} s "
                    f"({slowest.name}, {during})",
                )
            )
        rows += self._takeover_rows()
        throttled = ", ".join(f"{kind} {n}" for kind, n in sorted(self.throttled.items()))
        rows += [
            ("operators' requests refused by RBAC (403)", _count(self.forbidden)),
            (
                "operators' requests throttled (429)",
                f"{sum(self.throttled.values())}" + (f": {throttled}" if throttled else ""),
            ),
        ]
        op = self.operator
        restarts = ", ".join(f"{k} {v:g}" for k, v in sorted(op.watch_restarts.items()))
        rows += [
            (
                "operator",
                f"{op.starts} starts, {op.reconcile_errors:g} reconcile errors, "
                f"watch restarts: {restarts or 'none'}, {len(op.error_lines)} error lines",
            ),
            (
                "harness watches",
                "; ".join(
                    f"{resource}: {c['outages']} outages, {c['relists']} relists"
                    for resource, c in self.coverage.items()
                ),
            ),
        ]
        width = max(len(label) for label, _ in rows)
        verdict = "PASS" if self.ok else "FAIL"
        return "\n".join([*(f"{label:<{width}}  {value}" for label, value in rows), verdict])

    def _met_row(self) -> str:
        alone = [
            f"{f.kind} at {f.began:.0f} s"
            for f, n in zip(self.faults, self.jobs_met, strict=True)
            if not n
        ]
        met = len(self.faults) - len(alone)
        return f"{met} of {len(self.faults)}" + (
            f"; none under way: {', '.join(alone)}" if alone else ""
        )

    def _takeover_rows(self) -> list[tuple[str, str]]:
        if not self.takeovers:
            return []

        def spread(values: list[float]) -> str:
            if not values:
                return "none seen"
            return f"p50 {statistics.median(values):.1f} s, max {max(values):.1f} s"

        taken = [t.lease_taken for t in self.takeovers if t.lease_taken is not None]
        first = [t.first_write for t in self.takeovers if t.first_write is not None]
        missed = [f"{t.kind} of {t.old}" for t in self.takeovers if t.new is None]
        by_kind: dict[str, list[float]] = defaultdict(list)
        for t in self.takeovers:
            if t.lease_taken is not None:
                by_kind[t.kind].append(t.lease_taken)
        return [
            (
                "takeovers (leader gone → Lease taken)",
                f"{len(taken)} of {len(self.takeovers)}: {spread(taken)}"
                + (f"; none after {', '.join(missed)}" if missed else ""),
            ),
            *((f"  after {kind}", spread(seconds)) for kind, seconds in sorted(by_kind.items())),
            ("takeovers (leader gone → first job write)", spread(first)),
            ("writes by a deposed leader", _count(self.deposed_writes)),
        ]


def _count(found: Sequence[object]) -> str:
    return str(len(found))


def _names(names: Any) -> str:
    listed = list(names)
    return f"{len(listed)}" + (f" ({', '.join(listed)})" if listed else "")


def judge(
    jobs: Sequence[ChaosJob],
    records: Sequence[Seen],
    faults: Sequence[Fault],
    leftovers: Mapping[str, list[str]],
    operator: OperatorFigures,
    requests: Sequence[Request],
    coverage: Mapping[str, Mapping[str, int]],
    wall_seconds: float,
    started_at: float,
) -> Verdict:
    """`started_at` is the run's start on the audit log's clock (epoch seconds): the
    faults' times count from it."""
    writes = sorted(
        (r for r in requests if r.stage in FINAL_STAGES and r.is_write), key=lambda r: r.received
    )
    return Verdict(
        jobs=[job_result(job, records, faults) for job in jobs],
        lost_terminal_states=lost_terminal_states(records),
        reruns_after_success=reruns_after_success(records),
        duplicate_pods=duplicate_pods(records),
        evictions_without_node_loss=evictions_without_node_loss(records, faults),
        leftovers={kind: sorted(names) for kind, names in leftovers.items()},
        faults=list(faults),
        operator=operator,
        coverage={resource: dict(c) for resource, c in coverage.items()},
        wall_seconds=round(wall_seconds, 1),
        takeovers=takeovers(faults, writes),
        deposed_writes=deposed_writes(writes),
        forbidden=[
            {"user": r.user, "request": f"{r.kind} {r.namespace}/{r.name}", "at": r.received}
            for r in answered(requests, 403)
            if not _apiserver_starting(r.received - started_at, faults)
        ],
        throttled=dict(Counter(r.kind for r in answered(requests, 429))),
        jobs_met=[len(jobs_under_way(fault, records)) for fault in faults],
    )


def jobs_under_way(fault: Fault, records: Sequence[Seen]) -> list[str]:
    """The jobs seen before `fault` ended that had not shown a terminal state before it
    began: the jobs it could have harmed."""
    seen_at: dict[str, float] = {}
    ended_at: dict[str, float] = {}
    for r in records:
        if r.resource != "tfjobs":
            continue
        seen_at.setdefault(r.name, r.at)
        if r.state in TERMINAL:
            ended_at.setdefault(r.name, r.at)
    return sorted(
        name
        for name, first in seen_at.items()
        if first <= fault.ended and ended_at.get(name, float("inf")) >= fault.began
    )


def _apiserver_starting(moment: float, faults: Sequence[Fault]) -> bool:
    """Whether the API server was starting after a fault restarted it, at `moment` (run
    seconds): it answers before its authorizer has read the cluster's roles, and refuses
    (403) what they allow until it has: its start's, not the chart's."""
    return any(
        f.kind in RESTARTS_APISERVER and f.began <= moment <= f.ended + STARTING_SECONDS
        for f in faults
    )


def answered(requests: Sequence[Request], code: int) -> list[Request]:
    """The requests (final stages) the API server answered with `code`."""
    return [r for r in requests if r.stage in FINAL_STAGES and r.code == code]


def _took_lease(request: Request) -> bool:
    return request.resource == "leases" and 200 <= request.code < 300


def takeovers(faults: Sequence[Fault], writes: Sequence[Request]) -> list[Takeover]:
    """For each fault that took the leader away: who took the Lease next, and when.
    `writes` are the operators' write requests, in the order the server received them."""
    found = []
    for fault in faults:
        gone = fault.leader_gone
        if gone is None:
            continue
        taken = next(
            (r for r in writes if r.received >= gone and r.user != fault.leader and _took_lease(r)),
            None,
        )
        first = None
        if taken is not None:
            first = next(
                (
                    r
                    for r in writes
                    if r.user == taken.user
                    and r.received >= taken.received
                    and r.resource not in ("leases", "events")
                ),
                None,
            )
        found.append(
            Takeover(
                kind=fault.kind.value,
                old=fault.leader,
                new=taken.user if taken else None,
                lease_taken=round(taken.received - gone, 2) if taken else None,
                first_write=round(first.received - gone, 2) if first else None,
            )
        )
    return found


def deposed_writes(writes: Sequence[Request]) -> list[dict[str, Any]]:
    """Writes for a job (not the Lease's own, nor events) by an operator other than the
    one whose Lease write the server took last: a leader writing after it was deposed."""
    holder = ""
    found = []
    for r in writes:
        if r.resource == "leases":
            if _took_lease(r):
                holder = r.user
        elif r.resource != "events" and holder and r.user != holder:
            found.append(
                {
                    "user": r.user,
                    "holder": holder,
                    "request": f"{r.kind} {r.namespace}/{r.name}",
                    "code": r.code,
                    "received": r.received,
                }
            )
    return found


def job_result(job: ChaosJob, records: Sequence[Seen], faults: Sequence[Fault]) -> JobResult:
    mine = [r for r in records if r.resource == "tfjobs" and r.name == job.name]
    last = mine[-1] if mine else None
    settled = next((r.at for r in mine if r.state == job.expected_state), None)
    leader = f"{job.name}-worker-0"
    ends = [r for r in records if r.resource == "pods" and r.name == leader and _exited(r)]
    lag = None
    during: list[str] = []
    if ends and settled is not None:
        final = max(ends, key=lambda r: int(r.generation or 0)).generation
        ended = min(r.at for r in ends if r.generation == final)
        lag = round(settled - ended, 3)
        during = [f.kind.value for f in faults if f.began < settled and f.ended > ended]
    evicted = evicted_generations(job.name, records)
    unstarted = unstarted_generations(job.name, records)
    reasons = {r.disruption for r in records if r.resource == "pods" and r.job == job.name}
    explained = (
        any(reason in r.restarting for r in mine for reason in reasons - {""}) if evicted else None
    )
    return JobResult(
        name=job.name,
        outcome=job.outcome.value,
        expected_state=job.expected_state,
        state=last.state if last else "(never seen)",
        expected_restarts=job.expected_restarts({*evicted, *unstarted}),
        restarts=last.restarts if last else 0,
        evicted_generations=evicted,
        unstarted_generations=unstarted,
        explained=explained,
        settled_at=settled,
        lag=lag,
        faults_during_lag=during,
    )


def evicted_generations(job: str, records: Sequence[Seen]) -> list[int]:
    """The generations of `job`'s pods that were taken away (DisruptionTarget) before
    their leader's exit was seen: once the leader has exited, its exit decides."""
    leader = f"{job}-worker-0"
    exited: dict[str, float] = {}
    evicted: dict[str, float] = {}
    for r in records:
        if r.resource != "pods" or r.job != job:
            continue
        if r.disruption:
            evicted.setdefault(r.generation, r.at)
        elif r.name == leader and _exited(r):
            exited.setdefault(r.generation, r.at)
    return sorted(
        int(generation)
        for generation, at in evicted.items()
        if at < exited.get(generation, float("inf"))
    )


def unstarted_generations(job: str, records: Sequence[Seen]) -> list[int]:
    """The generations of `job` in which a pod could not start: its container ended with
    the runtime's StartError code, which no script of the workload exits with (a kubelet
    restarted while the API server restarts can leave a container so)."""
    return sorted(
        {
            int(r.generation)
            for r in records
            if r.resource == "pods" and r.job == job and r.exit_code == START_ERROR_EXIT
        }
    )


def evictions_without_node_loss(
    records: Sequence[Seen], faults: Sequence[Fault]
) -> list[dict[str, Any]]:
    """Pods first seen taken away while no node was lost."""
    lost = [(f.began, f.ended) for f in faults if f.kind is FaultKind.NODE_LOSS]
    first: dict[str, Seen] = {}
    for r in records:
        if r.resource == "pods" and r.disruption:
            first.setdefault(r.uid, r)
    return [
        {"pod": r.name, "generation": r.generation, "reason": r.disruption, "at": r.at}
        for r in first.values()
        if not any(began <= r.at <= ended for began, ended in lost)
    ]


def _exited(pod: Seen) -> bool:
    return pod.exit_code is not None or pod.state in POD_ENDED


def lost_terminal_states(records: Sequence[Seen]) -> list[dict[str, Any]]:
    """Each TFJob shown with another state after it was shown Succeeded or Failed."""
    terminal: dict[str, Seen] = {}
    lost = []
    for r in records:
        if r.resource != "tfjobs" or r.event == "DELETED":
            continue
        first = terminal.get(r.uid)
        if first is None:
            if r.state in TERMINAL:
                terminal[r.uid] = r
        elif r.state != first.state:
            lost.append(
                {
                    "job": r.name,
                    "was": first.state,
                    "at": first.at,
                    "then": r.state,
                    "then_at": r.at,
                }
            )
    return lost


def reruns_after_success(records: Sequence[Seen]) -> list[dict[str, Any]]:
    """Pods first seen for a replica (a pod name) after a pod of it was seen succeed.

    A success counts unless the pod was already being deleted for a disruption when it ended.
    """
    succeeded: dict[str, float] = {}
    known: set[str] = set()
    reruns = []
    for r in records:
        if r.resource != "pods":
            continue
        if r.uid not in known:
            known.add(r.uid)
            if r.name in succeeded:
                reruns.append(
                    {
                        "pod": r.name,
                        "generation": r.generation,
                        "at": r.at,
                        "succeeded_at": succeeded[r.name],
                    }
                )
        lost_before = r.deleting and bool(r.disruption)
        if (r.state == "Succeeded" or r.exit_code == 0) and not lost_before:
            succeeded.setdefault(r.name, r.at)
    return reruns


def duplicate_pods(records: Sequence[Seen]) -> list[dict[str, Any]]:
    """Replicas (pod names) with more than one pod in one generation."""
    uids: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in records:
        if r.resource == "pods":
            uids[(r.name, r.generation)].setdefault(r.uid, r.at)
    return [
        {"pod": name, "generation": generation, "first_seen": sorted(seen.values())}
        for (name, generation), seen in sorted(uids.items())
        if len(seen) > 1
    ]
