"""Events: what the operator did to a TFJob, as `kubectl describe tfjob` shows it.

An event that repeats, as a refused pod does at every retry or a kubelet's image pull
error at every back-off, counts up one Event object instead of adding one each time, as
client-go's recorder does: same TFJob, type, reason and series (a replica, where the
message carries volatile detail; the message itself otherwise) within SERIES_WINDOW_SECONDS.
The Event keeps its first timestamp and takes the latest message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from .api import FIELD_MANAGER, KIND, JobRef
from .timeutil import to_rfc3339

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
#: A message naming hundreds of children is cut to this length.
MAX_MESSAGE_LENGTH: Final = 1024
#: A repeat within this long counts up the Event it repeats (client-go's window too).
SERIES_WINDOW_SECONDS: Final = 600.0
#: Series kept before those past the window are dropped.
PRUNE_AT: Final = 1024


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    #: What repeats of this event have in common beyond the TFJob, type and reason (the
    #: replica it is about); "" means the message.
    series: str = ""


def _cut(message: str) -> str:
    if len(message) > MAX_MESSAGE_LENGTH:
        return message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return message


def event_object(
    job: JobRef, resource_version: str, event: Event, now: datetime, instance: str
) -> dict[str, Any]:
    """A core/v1 Event about `job`, written by this operator instance."""
    message = _cut(event.message)
    moment = to_rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
        "involvedObject": {
            "apiVersion": job.api.api_version,
            "kind": KIND,
            "namespace": job.namespace,
            "name": job.name,
            "uid": job.uid,
            "resourceVersion": resource_version,
        },
        "type": event.type,
        "reason": event.reason,
        "message": message,
        "source": {"component": FIELD_MANAGER},
        "reportingComponent": FIELD_MANAGER,
        "reportingInstance": instance,
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
    }


def repeat_patch(event: Event, count: int, now: datetime) -> dict[str, Any]:
    """The merge patch that makes an Event count a repeat of itself."""
    return {"count": count, "lastTimestamp": to_rfc3339(now), "message": _cut(event.message)}


@dataclass
class Series:
    """The Event that repeats of one event count up: its name once created."""

    name: str | None = None
    count: int = 0
    #: When the series last had an event (monotonic seconds).
    seen: float = 0.0
    #: Held while the Event is created or patched: repeats in flight wait their turn.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EventSeries:
    """The series of recent events, by TFJob uid, type, reason and series key."""

    def __init__(self, window: float = SERIES_WINDOW_SECONDS) -> None:
        self.window = window
        self._series: dict[tuple[str, str, str, str], Series] = {}

    def of(self, job_uid: str, event: Event, monotonic: float) -> Series:
        """The series `event` belongs to: a new one after the window."""
        key = (job_uid, event.type, event.reason, event.series or event.message)
        series = self._series.get(key)
        if series is None or monotonic - series.seen > self.window:
            if len(self._series) >= PRUNE_AT:
                self._prune(monotonic)
            series = self._series[key] = Series()
        series.seen = monotonic
        return series

    def _prune(self, monotonic: float) -> None:
        """Drops the series past the window: their next event starts a new Event anyway."""
        for key in [k for k, s in self._series.items() if monotonic - s.seen > self.window]:
            del self._series[key]

    def __len__(self) -> int:
        return len(self._series)
