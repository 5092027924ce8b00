"""Figures of a run computed from the audit log and the watch times (pure functions).

Moments come from the API server's audit log where the server is the witness (an object
created: the create's response; the leader's exit: its status write) and from the
harness's watches where a client is (a TFJob's Succeeded condition seen).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.shape import job_of_child
from bench.stats import summarize
from harness.audit import Request, created


@dataclass(frozen=True)
class Span:
    """From the first request received to the last object's create answered."""

    first: float
    last: float
    objects: int

    @property
    def seconds(self) -> float:
        return self.last - self.first

    @property
    def per_second(self) -> float:
        return self.objects / self.seconds if self.seconds > 0 else float("inf")


def creation_span(start_requests: Sequence[Request], creates: Sequence[Request]) -> Span:
    """`start_requests` open the span (their earliest receipt); `creates` close it."""
    if not start_requests or not creates:
        raise ValueError("no requests to measure a span from")
    return Span(
        first=min(r.received for r in start_requests),
        last=max(r.at for r in creates),
        objects=len(creates),
    )


def children_done(creates: Iterable[Request]) -> dict[str, float]:
    """Job name -> when the last of its children (in `creates`) was created."""
    done: dict[str, float] = {}
    for request in creates:
        job = job_of_child(request.name)
        done[job] = max(done.get(job, 0.0), request.at)
    return done


def per_job(starts: Mapping[str, float], ends: Mapping[str, float]) -> dict[str, float]:
    """end - start for every job that has both."""
    return {job: ends[job] - starts[job] for job in starts if job in ends}


def jobs_created(requests: Iterable[Request], user: str) -> dict[str, float]:
    """TFJob name -> when `user`'s create of it was answered."""
    return {r.name: r.at for r in created(requests, "tfjobs") if r.user == user}


def leader_exit_requests(
    requests: Iterable[Request], user: str, leaders: Mapping[str, str]
) -> dict[str, Request]:
    """Job name -> `user`'s status write that ended its leader pod.

    `leaders` maps each leader pod's name to its job.
    """
    exits: dict[str, Request] = {}
    for r in requests:
        if (
            r.user == user
            and r.resource == "pods"
            and r.subresource == "status"
            and r.verb == "patch"
            and 200 <= r.code < 300
            and r.name in leaders
        ):
            exits[leaders[r.name]] = r
    return exits


def answered_at(by_job: Mapping[str, Request]) -> dict[str, float]:
    """Job name -> when its request was answered."""
    return {job: r.at for job, r in by_job.items()}


@dataclass(frozen=True)
class ExitSplit:
    """Where one job's exit→Succeeded went, by the audit log and the harness's watch.

    - `react`: from the exit's answer to the controller's first status write of the job
      being received. A write received after the exit was, but before it was answered,
      counts: a watch can deliver the change before its writer has its answer, so
      `react` can be a little below 0.
    - `write`: that write's time in the API server.
    - `seen`: from its answer to the harness seeing Succeeded (the watch's delivery, plus
      any later write if the first one did not decide).

    The three add up to exit→Succeeded.
    """

    react: float
    write: float
    seen: float


def exit_splits(
    exits: Mapping[str, Request],
    requests: Iterable[Request],
    user: str,
    succeeded_at: Mapping[str, float],
) -> dict[str, ExitSplit]:
    """Job name -> its split, for the jobs whose exit, status write and Succeeded are known."""
    first: dict[str, Request] = {}
    for r in requests:
        exit_ = exits.get(r.name)
        if (
            exit_ is None
            or r.user != user
            or (r.resource, r.subresource) != ("tfjobs", "status")
            or r.verb not in ("patch", "update")
            or r.received < exit_.received
        ):
            continue
        if r.name not in first or r.received < first[r.name].received:
            first[r.name] = r
    return {
        job: ExitSplit(
            react=write.received - exits[job].at,
            write=write.at - write.received,
            seen=succeeded_at[job] - write.at,
        )
        for job, write in first.items()
        if job in succeeded_at
    }


def split_summary(splits: Mapping[str, ExitSplit]) -> dict[str, dict[str, float | int]]:
    parts = splits.values()
    return {
        "react": summarize([s.react for s in parts]),
        "write": summarize([s.write for s in parts]),
        "seen": summarize([s.seen for s in parts]),
    }


class IncompleteRun(RuntimeError):
    pass


def completion(
    requests: Sequence[Request],
    driver: str,
    leaders: Mapping[str, str],
    controller: str,
    succeeded_at: Mapping[str, float],
) -> dict[str, Any]:
    """exit→Succeeded of every job and its split, as a phase's result reports them.

    `requests` are the audit log's final records; `driver` ended the leaders (`leaders`:
    leader pod -> job) and `controller` marked the jobs Succeeded. Raises IncompleteRun
    unless every job's exit and Succeeded moments are known.
    """
    exits = leader_exit_requests(requests, driver, leaders)
    exit_to_succeeded = per_job(answered_at(exits), succeeded_at)
    if len(exit_to_succeeded) != len(leaders):
        raise IncompleteRun(
            f"exit and Succeeded moments known for {len(exit_to_succeeded)} of {len(leaders)} jobs"
        )
    return {
        "exit_to_succeeded_seconds": summarize(list(exit_to_succeeded.values())),
        "exit_split_seconds": split_summary(exit_splits(exits, requests, controller, succeeded_at)),
        "exits_received_seconds": exits_received(exits),
    }


def exits_received(exits: Mapping[str, Request]) -> dict[str, float]:
    """How dense the burst of exits was: seconds from the API server receiving the first
    exit until it had received half of them (`half`) and all of them (`all`).

    The driver keeps a fixed number of exits in flight, so their pace follows the API
    server's answers, which the controller's own writes slow: the two phases need not get
    the same burst, and exit→Succeeded grows with its density (see bench/README.md).
    """
    received = sorted(r.received for r in exits.values())
    return {
        "half": round(received[(len(received) - 1) // 2] - received[0], 3),
        "all": round(received[-1] - received[0], 3),
    }


def distinct_names(creates: Iterable[Request]) -> int:
    return len({(r.resource, r.namespace, r.name) for r in creates})
