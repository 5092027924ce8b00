"""A small asyncio client of the Kubernetes API: JSON requests and watches, as dicts.

The harness's clients (driver and floor) must cost as little as possible on 2 cores and
must not hide what the API server does, so this is aiohttp with a client certificate and
nothing else: no models, no client-side rate limit, no retries. JSON goes through orjson,
as in the operator: the driver parses every pod's watch events, and a slow parse would
show up as the operator's latency. The kubeconfig and the API's errors are read as the
operator reads them (tfjob_operator.connection, .kube).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from tfjob_operator.connection import load_connection
from tfjob_operator.errors import ApiError
from tfjob_operator.kube import JSON, unavailable

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
        connection = load_connection(str(kubeconfig))
        self.server, self._tls = connection.server, connection.ssl_context
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
        connector = aiohttp.TCPConnector(ssl=self._tls, limit=self._connections)
        self._session = aiohttp.ClientSession(
            self.server,
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            headers={"Accept": JSON, "User-Agent": "tfjob-bench"},
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ApiClient used outside `async with`")
        return self._session

    async def send(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        content_type: str = JSON,
    ) -> tuple[int, Any]:
        """The status code and the decoded reply, whatever the status."""
        data = None if body is None else orjson.dumps(body)
        async with self.session.request(
            method,
            path,
            data=data,
            headers={"Content-Type": content_type},
            timeout=aiohttp.ClientTimeout(total=REQUEST_SECONDS),
        ) as reply:
            raw = await reply.read()
            try:
                decoded: Any = orjson.loads(raw) if raw else None
            except ValueError:
                decoded = raw.decode(errors="replace")
            return reply.status, decoded

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
        async with self.session.get(
            path,
            headers={"Accept": "text/plain"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_SECONDS),
        ) as reply:
            raw = await reply.read()
            if not 200 <= reply.status < 300:
                raise ApiError(reply.status, f"GET {path}", raw)
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
        async with self.session.get(path, params=params) as reply:
            if reply.status == 410:
                return None
            if reply.status != 200:
                raise ApiError(reply.status, f"WATCH {path}", await reply.read())
            buffer = b""
            async for chunk in reply.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            return None
                        code = int(obj.get("code") or 0)
                        raise ApiError(code, f"WATCH {path}", orjson.dumps(obj))
                    version = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        handler(kind, obj)
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
