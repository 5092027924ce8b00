"""Figures of a run computed from the audit log and the watch times (pure functions).

Moments come from the API server's audit log where the server is the witness (an object
created: the create's response; the leader's exit: its status write) and from the
harness's watches where a client is (a TFJob's Succeeded condition seen).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.audit import Request, created
from bench.shape import job_of_child


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


def leader_exits(
    requests: Iterable[Request], user: str, leaders: Mapping[str, str]
) -> dict[str, float]:
    """Job name -> when `user`'s status write that ended its leader pod was answered.

    `leaders` maps each leader pod's name to its job.
    """
    exits: dict[str, float] = {}
    for r in requests:
        if (
            r.user == user
            and r.resource == "pods"
            and r.subresource == "status"
            and r.verb == "patch"
            and 200 <= r.code < 300
            and r.name in leaders
        ):
            exits[leaders[r.name]] = r.at
    return exits


def distinct_names(creates: Iterable[Request]) -> int:
    return len({(r.resource, r.namespace, r.name) for r in creates})
