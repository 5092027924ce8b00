"""RFC 3339 timestamps as Kubernetes writes them (UTC, whole seconds, `Z`)."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def to_rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_micro_rfc3339(moment: datetime) -> str:
    """Kubernetes' MicroTime (a Lease's acquire and renew times): microseconds, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_rfc3339(text: str) -> datetime:
    """Accepts any RFC 3339 form (fractional seconds, offsets) other writers may use."""
    return datetime.fromisoformat(text).astimezone(UTC)
