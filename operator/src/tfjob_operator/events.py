"""Events: what the operator did to a TFJob, as `kubectl describe tfjob` shows it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from .api import FIELD_MANAGER, KIND, JobRef
from .timeutil import to_rfc3339

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
#: A message naming hundreds of children is cut to this length.
MAX_MESSAGE_LENGTH: Final = 1024


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


def event_object(
    job: JobRef, resource_version: str, event: Event, now: datetime, instance: str
) -> dict[str, Any]:
    """A core/v1 Event about `job`, written by this operator instance."""
    message = event.message
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
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
