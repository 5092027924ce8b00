"""The API server's refusals as one error type, for the operator and the client alike,
and a watch's end the same way for both (WatchExpired, or an ApiError from an ERROR event).

It depends on nothing beyond the standard library, so the client (tfjob_operator.client),
which a notebook installs without the controller's dependencies, raises the same error the
controller handles.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

#: The cause the API server gives when a namespace being deleted refuses a new object.
NAMESPACE_TERMINATING: Final = "NamespaceTerminating"


class ApiError(RuntimeError):
    """The API server refused a request for a reason the caller cannot handle itself."""

    def __init__(self, status: int, what: str, body: bytes) -> None:
        try:
            payload = json.loads(body)
            detail = payload.get("message", "")
            reason = payload.get("reason", "")
            details = payload.get("details") or {}
            causes = details.get("causes") or []
            retry_after = details.get("retryAfterSeconds")
        except (ValueError, AttributeError):
            detail = body[:200].decode(errors="replace")
            reason = ""
            causes = []
            retry_after = None
        super().__init__(f"{what}: HTTP {status}: {detail}")
        self.status = status
        #: The API server's own words: its message, and its reason (Invalid, Forbidden, ...).
        self.detail = str(detail)
        self.reason = str(reason or "")
        self.causes = frozenset(str(c.get("reason")) for c in causes if isinstance(c, dict))
        #: When the API server asks to be tried again (429 of API Priority and Fairness,
        #: some 5xx): its Status's `details.retryAfterSeconds`, as client-go reads it.
        self.retry_after: float | None = (
            float(retry_after) if isinstance(retry_after, int | float) and retry_after > 0 else None
        )

    @property
    def refused(self) -> bool:
        """The API server refused the object (4xx: invalid, forbidden by an admission or a
        quota), rather than failed to serve it (429, 5xx) or held one of its name (409)."""
        return 400 <= self.status < 500 and self.status not in (409, 429)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def namespace_terminating(self) -> bool:
        """The namespace is being deleted: it accepts no new objects, and takes the job too."""
        return self.status == 403 and NAMESPACE_TERMINATING in self.causes


class WatchExpired(Exception):
    """The version a watch started from is gone (410 Gone, compacted): list again."""


def watch_event(event: Mapping[str, Any], what: str) -> tuple[str, dict[str, Any]]:
    """A decoded line of a watch as (type, object), bookmarks included. An ERROR event ends
    the watch: WatchExpired for 410 Gone, else an ApiError with its code."""
    kind, body = str(event.get("type")), dict(event.get("object") or {})
    if kind == "ERROR":
        if body.get("code") == 410:
            raise WatchExpired(what)
        raise ApiError(int(body.get("code") or 500), what, json.dumps(body).encode())
    return kind, body
