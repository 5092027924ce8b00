"""The async front to the API server: the operator's requests and watches on one aiohttp
session (the harness's too, without the write policy).

Requests carry JSON built as data and answers are read as bytes: the controller needs a
status code and a few fields, not a client library's models, whose import alone costs
more memory than a thousand TFJobs. JSON goes through orjson: on a pod-sized object it
parses 2.4x and writes 8x faster than the standard library here, and parsing watch events
is the largest single cost of the operator (see bench/README.md).

Writes share `max_in_flight` slots, handed out by priority: a status write that records a
decision goes ahead of the child creates and deletes that act on it, then a status that
reports progress, then a finished job's clean-up, then events. Clean-up and events also
wait while any decision is queued or in flight: a burst of finished jobs then reports
every job Succeeded before the API server starts deleting their pods. How long each write
waited for its turn and for its answer goes to the operator's metrics, by priority: they
tell the operator's own queues from the API server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator, Mapping
from enum import IntEnum
from typing import Any, Final

import aiohttp
import orjson

from ..backoff import MAX_RETRY_AFTER_SECONDS, jittered, retry_after_header
from ..limits import MAX_IN_FLIGHT
from ..metrics import Metrics
from ..published import OPERATOR, VERSION
from . import JSON
from .connection import Connection
from .errors import ApiError, WatchExpired, watch_event

logger = logging.getLogger(__name__)

#: The longest a single write may take before it counts as failed.
WRITE_TIMEOUT_SECONDS: Final = 30.0
#: Tries of one request the API server asks to repeat (`Retry-After` on 429 or 5xx).
MAX_TRIES: Final = 5
#: How the operator names itself to the API server (its audit log, API Priority and
#: Fairness' flow schemas can match it).
USER_AGENT: Final = f"{OPERATOR}/{VERSION}"


class NotLeading(RuntimeError):
    """This operator does not lead (leader.py): it sends no write."""


def unavailable(error: BaseException) -> bool:
    """Whether `error` means the API server could not be reached or could not serve (it is
    down or restarting, or its etcd is), or this operator may not write now: worth trying
    again later, not a traceback."""
    if isinstance(error, NotLeading):
        return True
    if isinstance(error, ApiError):
        return error.status == 429 or error.status >= 500
    return isinstance(error, aiohttp.ClientError | OSError)


def raise_for(status: int, what: str, payload: bytes) -> None:
    if not 200 <= status < 300:
        raise ApiError(status, what, payload)


class Priority(IntEnum):
    DECISION = 0
    CHILD = 1
    PROGRESS = 2
    CLEANUP = 3
    EVENT = 4

    @property
    def label(self) -> str:
        """The `priority` label of the write metrics: `decision`, `child`, ..."""
        return self.name.lower()


#: Background writes (clean-up, events) wait while a decision is being written, at most
#: this long: a burst of finished jobs is reported before the API server spends itself on
#: deleting their pods, and a steady stream of decisions cannot starve the background.
BACKGROUND_WAIT_SECONDS: Final = 5.0


class _Slots:
    """A semaphore whose waiters are admitted lowest priority first, then in arrival order."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def hold(self, priority: Priority) -> AsyncIterator[None]:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (priority, next(self._arrivals), turn))
            try:
                await turn
            except asyncio.CancelledError:
                if not turn.cancelled():
                    self._release()
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, turn = heapq.heappop(self._waiting)
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


class _Decisions:
    """Counts the decision writes queued or in flight; background writes wait for none."""

    def __init__(self) -> None:
        self._count = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        self._count += 1
        self._none.clear()
        try:
            yield
        finally:
            self._count -= 1
            if self._count == 0:
                self._none.set()

    async def none_for_up_to(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none.wait(), seconds)


class ApiServerClient:
    """Requests to one API server with the operator's credentials."""

    def __init__(
        self,
        connection: Connection,
        max_in_flight: int = MAX_IN_FLIGHT,
        metrics: Metrics | None = None,
        *,
        connections: int = 0,
        user_agent: str = USER_AGENT,
    ) -> None:
        """`connections`: the most open at once (0: no bound; the operator's writes are
        bounded by their slots, and watches and lists need none)."""
        self.connection = connection
        self._connections = connections
        self._user_agent = user_agent
        #: Where each write's wait for its turn and its time in flight are recorded.
        self.metrics = metrics or Metrics()
        self._slots = _Slots(max_in_flight)
        self._decisions = _Decisions()
        self._session: aiohttp.ClientSession | None = None
        #: Until when (time.monotonic()) a write may be sent and awaited: with leader
        #: election, the leader's renew deadline (leader.Elector.write_deadline). Read as
        #: each write is sent and re-sent; a write in flight is abandoned when it passes.
        self.fence: Callable[[], float] = lambda: math.inf
        self._in_flight: set[asyncio.Timeout] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                base_url=self.connection.server,
                connector=aiohttp.TCPConnector(
                    ssl=self.connection.ssl_context, limit=self._connections
                ),
                headers={"User-Agent": self._user_agent},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def abandon_writes(self) -> None:
        """Leadership is lost: every write in flight stops waiting for its answer now (it
        raises NotLeading), and no other is sent (the fence says so)."""
        now = asyncio.get_running_loop().time()
        for timeout in self._in_flight:
            timeout.reschedule(now)

    async def send(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = JSON,
        priority: Priority = Priority.CHILD,
    ) -> tuple[int, bytes]:
        """A write (or a read the watches do not cover): waits for a slot, returns the
        status code and the raw answer. It is sent only while the fence is open and is
        abandoned when the fence closes (NotLeading)."""
        data = orjson.dumps(body) if body is not None else None
        label = priority.label
        queued = time.monotonic()
        if priority >= Priority.CLEANUP:
            await self._decisions.none_for_up_to(BACKGROUND_WAIT_SECONDS)
        decision = (
            self._decisions.writing() if priority is Priority.DECISION else contextlib.nullcontext()
        )
        with decision:
            async with self._slots.hold(priority):
                sent = time.monotonic()
                self.metrics.write_wait_seconds.labels(label).observe(sent - queued)
                try:
                    return await self._fenced(
                        f"{method} {path}",
                        self.request(
                            method, path, data=data, params=params, type_=content_type, fenced=True
                        ),
                    )
                finally:
                    self.metrics.write_seconds.labels(label).observe(time.monotonic() - sent)

    async def _fenced(
        self, what: str, request: Coroutine[Any, Any, tuple[int, bytes]]
    ) -> tuple[int, bytes]:
        """Runs `request` until the fence closes at the latest; NotLeading if it did."""
        try:
            async with asyncio.timeout(self._fence_left(what)) as timeout:
                self._in_flight.add(timeout)
                try:
                    return await request
                finally:
                    self._in_flight.discard(timeout)
        except TimeoutError as error:
            if self.fence() > time.monotonic():
                raise
            raise NotLeading(f"{what}: abandoned, this operator's leadership ended") from error
        finally:
            request.close()

    def _fence_left(self, what: str) -> float | None:
        """Seconds until the fence closes (None: it never does); NotLeading if it is shut."""
        left = self.fence() - time.monotonic()
        if left <= 0:
            raise NotLeading(f"{what}: this operator does not lead")
        return None if math.isinf(left) else left

    async def request(
        self,
        method: str,
        path: str,
        *,
        data: bytes | None = None,
        params: Mapping[str, str] | None = None,
        type_: str = JSON,
        accept: str = JSON,
        limit_seconds: float = WRITE_TIMEOUT_SECONDS,
        fenced: bool = False,
        max_tries: int = MAX_TRIES,
    ) -> tuple[int, bytes]:
        """One request, all tries within `limit_seconds`: once more with fresh credentials
        after a 401, and again after the wait a 429's or 5xx's `Retry-After` asks, as
        client-go does, while that wait ends in time, `max_tries` in all. A `fenced`
        request checks the fence before each try."""
        until = time.monotonic() + limit_seconds
        refreshed = False
        for tries in itertools.count(1):
            if fenced:
                self._fence_left(f"{method} {path}")
            headers = await self._headers(refresh=refreshed, content_type=type_, accept=accept)
            timeout = aiohttp.ClientTimeout(total=max(until - time.monotonic(), 0.001))
            async with self.session.request(
                method, path, data=data, params=params, headers=headers, timeout=timeout
            ) as response:
                status, payload = response.status, await response.read()
                asked = retry_after_header(response.headers)
            if status == 401 and not refreshed:
                refreshed = True
                continue
            if status == 429:
                self.metrics.throttled.inc()
            if asked is None or not (status == 429 or status >= 500) or tries >= max_tries:
                break
            wait = jittered(min(asked, MAX_RETRY_AFTER_SECONDS))
            if time.monotonic() + wait >= until:
                break
            logger.debug("%s %s: HTTP %d, trying again in %.1fs", method, path, status, wait)
            await asyncio.sleep(wait)
        return status, payload

    async def watch(
        self, path: str, params: Mapping[str, str], idle_timeout: float | None, what: str
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """The events of one watch (bookmarks included) as (type, object), as they come; no
        write slot. Silent for `idle_timeout` seconds, it fails (None: it may be silent).
        Raises WatchExpired when the server says the version is gone (410, as the answer or
        as an ERROR event), ApiError for any other refusal."""
        headers = await self._headers(refresh=False, content_type=JSON)
        async with self.session.get(
            path,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=idle_timeout),
        ) as response:
            if response.status == 401:
                await self.connection.tokens.header(refresh=True)
            if response.status == 410:
                raise WatchExpired(what)
            raise_for(response.status, what, b"" if response.ok else await response.read())
            pending = b""
            async for chunk in response.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    yield watch_event(orjson.loads(line), what)

    async def _headers(
        self, refresh: bool, content_type: str, accept: str = JSON
    ) -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": content_type}
        authorization = await self.connection.tokens.header(refresh=refresh)
        if authorization:
            headers["Authorization"] = authorization
        return headers


def collection_path(namespace: str | None, plural: str, group_path: str = "/api/v1") -> str:
    return (
        f"{group_path}/namespaces/{namespace}/{plural}" if namespace else f"{group_path}/{plural}"
    )
