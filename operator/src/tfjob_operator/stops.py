"""Where a job's replicas stopped with a checkpoint: read from their termination messages.

A replica of the trainer image that receives SIGTERM while training (Kueue preempted the
job, the job was suspended, its node is drained) writes a checkpoint at a step all
replicas agree on, exits 42 and leaves one JSON line as its container's termination
message: `{"checkpoint": {"epoch": E, "step": S}}` (the trainer's stop_report.py). Any
image may write the same. The operator records the latest such stop in the TFJob's
`status.checkpoint` and says it in events and in the Suspended condition, and, when the
job runs again, that it resumes from that step: what a user asks of a preempted job,
answered after its pods are gone.

A suspended job's pods are deleted, and a pod's last status can be gone from the watch
cache before a decision reads it: `LastStops` keeps, for each job that still exists, the
latest stop read from a pod's DELETED event (one per job, forgotten with the job), with
the uid of the job the pod belonged to: a new job of the same name never takes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .api import PREEMPTION_EXIT_CODE
from .resources import JobKey
from .timeutil import from_rfc3339


@dataclass(frozen=True, slots=True)
class Stop:
    """A checkpoint a replica wrote as it stopped: the 1-based epoch and the optimizer's
    step count, and when its container finished (RFC 3339)."""

    epoch: int
    step: int
    at: str

    def describe(self) -> str:
        return f"step {self.step} (epoch {self.epoch})"

    def status(self) -> dict[str, Any]:
        """`status.checkpoint`, before the job runs again."""
        return {"step": self.step, "epoch": self.epoch, "stoppedAt": self.at}

    def later_than(self, other: Stop) -> bool:
        return self.later_than_time(other.at)

    def later_than_time(self, moment: str) -> bool:
        return from_rfc3339(self.at) > from_rfc3339(moment)


def stop_of(terminated: Mapping[str, Any] | None) -> Stop | None:
    """The stop a terminated container reported, if it exited 42 with the message."""
    if not terminated or terminated.get("exitCode") != PREEMPTION_EXIT_CODE:
        return None
    finished = terminated.get("finishedAt")
    try:
        checkpoint = json.loads(terminated.get("message") or "")["checkpoint"]
        epoch, step = checkpoint["epoch"], checkpoint["step"]
    except (ValueError, TypeError, KeyError):
        return None
    if not finished or not all(isinstance(n, int) and n >= 0 for n in (epoch, step)):
        return None
    return Stop(epoch=epoch, step=step, at=str(finished))


def pending_stop(checkpoint: Mapping[str, Any] | None) -> Stop | None:
    """The stop `status.checkpoint` holds, unless the job has resumed from it."""
    checkpoint = checkpoint or {}
    if not checkpoint.get("stoppedAt") or checkpoint.get("resumedAt"):
        return None
    return Stop(int(checkpoint["epoch"]), int(checkpoint["step"]), str(checkpoint["stoppedAt"]))


def latest(*stops: Stop | None) -> Stop | None:
    found = [stop for stop in stops if stop is not None]
    return max(found, key=lambda stop: from_rfc3339(stop.at)) if found else None


class LastStops:
    """The latest stop of each job read from its deleted pods (the module's docstring)."""

    def __init__(self) -> None:
        self._by_job: dict[JobKey, tuple[str, Stop]] = {}

    def note(self, key: JobKey, uid: str, stop: Stop) -> None:
        """`stop`, of a pod of the job `uid`, unless a later one of that job is kept."""
        known = self._by_job.get(key)
        if known is None or known[0] != uid or stop.later_than(known[1]):
            self._by_job[key] = (uid, stop)

    def get(self, key: JobKey, uid: str) -> Stop | None:
        """The stop kept for the job `uid`, if one of its pods reported it."""
        known = self._by_job.get(key)
        return known[1] if known is not None and known[0] == uid else None

    def forget(self, key: JobKey) -> None:
        self._by_job.pop(key, None)
