"""What one status write changed that the job metrics count (metrics.py), read from the
status before and after it.

The counts follow the job's conditions, not the operator's own bookkeeping: a condition
turns True once per transition whichever operator wrote it, so a new leader, reading the
status its predecessor wrote, counts nothing twice. Times are measured between the
timestamps the status and the object carry, not between reconciles:
- the admission wait: from the job's suspension by its queue (or its creation, when Kueue
  admitted it before the operator first saw it) to its resumption;
- the start: from `startTime` (when the operator began to create this run's pods: at the
  job's first reconcile, or its resumption) to every training replica running;
- the duration: from the job's creation to its end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import conditions as cond
from .api import ConditionType
from .job_view import JobView
from .timeutil import from_rfc3339

#: The phases a job ends in.
FINISHED = (ConditionType.SUCCEEDED, ConditionType.FAILED)


@dataclass(frozen=True)
class Transitions:
    """What a status write changed, for the metrics."""

    #: The first status of the job: the operator has taken it on.
    created: bool = False
    #: The phase whose condition turned True in this write (Running, Restarting,
    #: Succeeded, Failed, Suspended), if one did.
    entered: ConditionType | None = None
    #: Seconds a job of a queue waited for its admission, when it was admitted now.
    admitted_after: float | None = None
    #: Seconds from this run's startTime to every training replica running, on the first
    #: time they all run in this run.
    started_after: float | None = None
    #: The startTime the start above was measured from: a run's start is counted once.
    start_time: str | None = None
    #: Seconds from the job's creation to its end, when it ended now, and the reason of
    #: the condition it ended with (BackoffLimitExceeded, DeadlineExceeded, ...).
    finished_after: float | None = None
    finished_reason: str = ""


def transitions(
    job: JobView, after: Mapping[str, Any], now: datetime, started: str | None
) -> Transitions:
    """What writing `after` over `job`'s status changes; `started` is the startTime whose
    start was counted already, if one was."""
    before_conditions: Sequence[Mapping[str, Any]] = job.status.get("conditions") or ()
    after_conditions: Sequence[Mapping[str, Any]] = after.get("conditions") or ()
    created = not before_conditions and bool(after_conditions)
    entered = next(
        (
            kind
            for kind in ConditionType
            if kind is not ConditionType.CREATED
            and cond.is_true(after_conditions, kind)
            and not cond.is_true(before_conditions, kind)
        ),
        None,
    )
    started_after, start_time = _start(before_conditions, after, entered, started)
    return Transitions(
        created=created,
        entered=entered,
        admitted_after=_admission_wait(job, before_conditions, after_conditions, now, created),
        started_after=started_after,
        start_time=start_time,
        finished_after=(
            _seconds(job.created, _transition_time(after_conditions, entered))
            if entered in FINISHED
            else None
        ),
        finished_reason=(
            str((cond.find(after_conditions, entered) or {}).get("reason") or "")
            if entered in FINISHED
            else ""
        ),
    )


def _admission_wait(
    job: JobView,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    now: datetime,
    created: bool,
) -> float | None:
    if job.queue is None or cond.is_true(after, ConditionType.SUSPENDED):
        return None
    if cond.is_true(before, ConditionType.SUSPENDED):
        suspended = cond.find(before, ConditionType.SUSPENDED)
        since = str((suspended or {}).get("lastTransitionTime") or "")
    elif created:
        since = job.created
    else:
        return None
    if not since:
        return None
    return max(0.0, (now - from_rfc3339(since)).total_seconds())


def _start(
    before: Sequence[Mapping[str, Any]],
    after: Mapping[str, Any],
    entered: ConditionType | None,
    started: str | None,
) -> tuple[float | None, str | None]:
    """The start of this run, if it is the first time all its replicas run: a Running
    that turns True again (after a restart, or a pod that waited) is not a new start.
    `started` says so after a pod that waited; the status, after a restart (which a new
    leader, not having counted the start, reads too)."""
    start_time = str(after.get("startTime") or "")
    if (
        entered is not ConditionType.RUNNING
        or not start_time
        or start_time == started
        or cond.is_true(before, ConditionType.RESTARTING)
    ):
        return None, None
    running = _transition_time(after.get("conditions") or (), entered)
    return _seconds(start_time, running), start_time


def _transition_time(
    conditions: Sequence[Mapping[str, Any]], kind: ConditionType | None
) -> str | None:
    condition = cond.find(conditions, kind) if kind is not None else None
    if condition is None:
        return None
    return str(condition.get("lastTransitionTime") or "") or None


def _seconds(since: str | None, until: str | None) -> float | None:
    if not since or not until:
        return None
    return max(0.0, (from_rfc3339(until) - from_rfc3339(since)).total_seconds())
