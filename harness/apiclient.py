"""The harness's asyncio client of the Kubernetes API: JSON requests and watches, as dicts.

Built on the operator's own async front (tfjob_operator.kube.ApiServerClient: the
kubeconfig read as the operator reads it, one aiohttp session, orjson, the same watch
stream and ApiError). The harness's clients (driver and floor) must cost as little as
possible on 2 cores and must not hide what the API server does, so they take none of the
operator's write policy: no slots, no client-side rate limit, no retries (one try, fresh
credentials after a 401 aside); `connections` bounds the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from tfjob_operator.apiserver import JSON
from tfjob_operator.apiserver.aio import ApiServerClient, unavailable
from tfjob_operator.apiserver.connection import load_connection
from tfjob_operator.apiserver.errors import ApiError, WatchExpired

Obj = dict[str, Any]
#: Called with the watch event type (ADDED, MODIFIED, DELETED) and the object, or with
#: SYNCED and the whole listing after a listing's items have been delivered as ADDED.
EventHandler = Callable[[str, Obj], None]
SYNCED = "SYNCED"
#: Called with this and {"error": ...} when a watch that outlasts outages could not go on.
OUTAGE = "OUTAGE"
OUTAGE_RETRY_SECONDS = 0.5

#: Longest wait for one request (a watch has none).
REQUEST_SECONDS = 120


class ApiClient:
    """Requests and watches against one API server as one user (see the module docstring)."""

    def __init__(self, kubeconfig: Path, *, connections: int = 64) -> None:
        self.api = ApiServerClient(
            load_connection(str(kubeconfig)), connections=connections, user_agent="tfjob-bench"
        )

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.api.close()

    async def send(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        content_type: str = JSON,
    ) -> tuple[int, Any]:
        """The status code and the decoded reply, whatever the status."""
        status, raw = await self.api.request(
            method,
            path,
            data=None if body is None else orjson.dumps(body),
            type_=content_type,
            limit_seconds=REQUEST_SECONDS,
            max_tries=1,
        )
        try:
            decoded: Any = orjson.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return status, decoded

    async def request(
        self, method: str, path: str, body: Obj | None = None, *, content_type: str = JSON
    ) -> Any:
        """The decoded reply; raises ApiError unless the status is 2xx."""
        status, reply = await self.send(method, path, body, content_type=content_type)
        if not 200 <= status < 300:
            raise ApiError(status, f"{method} {path}", orjson.dumps(reply))
        return reply

    async def text(self, path: str) -> str:
        """A plain-text reply (the API server's /metrics); raises ApiError unless 2xx."""
        status, raw = await self.api.request(
            "GET", path, accept="text/plain", limit_seconds=REQUEST_SECONDS, max_tries=1
        )
        if not 200 <= status < 300:
            raise ApiError(status, f"GET {path}", raw)
        return raw.decode()

    async def watch(
        self,
        path: str,
        handler: EventHandler,
        synced: asyncio.Event | None = None,
        *,
        outlast_outages: bool = False,
    ) -> None:
        """Lists `path`, then watches it until cancelled; every object goes to `handler`.

        The listing arrives as ADDED events, then as one SYNCED event (objects deleted while
        no watch ran are absent from it); `synced` is set once it has been delivered. A
        watch the server ends is resumed from the last resourceVersion, and an expired one
        (410 Gone) starts over from a fresh listing. With `outlast_outages`, an API server
        that cannot be reached or answers 429 or 5xx is tried again every
        OUTAGE_RETRY_SECONDS, each failure going to `handler` as an OUTAGE event; otherwise
        the error propagates.
        """
        version: str | None = None
        while True:
            try:
                if version is None:
                    listing = await self.request("GET", path)
                    for item in listing.get("items") or []:
                        handler("ADDED", item)
                    handler(SYNCED, listing)
                    if synced is not None:
                        synced.set()
                    version = listing["metadata"]["resourceVersion"]
                version = await self._watch_from(path, version, handler)
            except (aiohttp.ClientError, OSError, ApiError) as error:
                if not (outlast_outages and unavailable(error)):
                    raise
                handler(OUTAGE, {"error": str(error) or type(error).__name__})
                await asyncio.sleep(OUTAGE_RETRY_SECONDS)

    async def _watch_from(self, path: str, version: str, handler: EventHandler) -> str | None:
        """Streams one watch; returns where to resume, or None when a new listing is due."""
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true"}
        events = self.api.watch(path, params, None, f"WATCH {path}")
        try:
            async with contextlib.aclosing(events):
                async for kind, obj in events:
                    version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        handler(kind, obj)
        except WatchExpired:
            return None
        return version


def reply_message(reply: Any) -> Any:
    """What a failed request's reply says: a Status's message, else the reply itself."""
    return reply.get("message") if isinstance(reply, dict) else reply


async def bounded(limit: int, calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Runs the calls with at most `limit` in flight, in order; the first error propagates."""
    queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
    for call in calls:
        queue.put_nowait(call)

    async def worker() -> None:
        while True:
            try:
                call = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await call()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(limit, len(calls))):
            group.create_task(worker())
