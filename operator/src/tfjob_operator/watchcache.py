"""Watch caches: list a resource, then watch it, keeping each object as a small record.

Each object is read into the record the controller decides from (a `JobView`, a
`PodObservation`, a `ServiceObservation`) as it arrives and the body is dropped, so a
thousand TFJobs cost a thousand small records, not a thousand pod bodies. Records are
grouped by the TFJob they belong to. A change wakes that job only if its record changed:
a pod update that touches nothing the controller reads (a heartbeat of the node, a
managedFields entry) costs a parse and a comparison, not a reconcile.

The protocol is the API server's (as client-go's reflector uses it): list in pages, watch
from the list's resourceVersion with bookmarks, resume from the last version seen when a
watch ends or fails for a while (the API server restarting, throttling, or refusing while
its authorizer starts: a relist of every pod after each blip would cost the API server
most when it can least afford it), and list again when the server answers 410 Gone (the
version has been compacted). A relist wakes every job whose records it changed,
including jobs whose objects were deleted while the watch was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

import aiohttp
import orjson

from .apiserver.aio import ApiServerClient, collection_path, raise_for, unavailable
from .apiserver.errors import ApiError, WatchExpired
from .backoff import delay_after
from .metrics import WatchCause
from .resources import JobKey, Resource

logger = logging.getLogger(__name__)

T = TypeVar("T")

LIST_PAGE_SIZE: Final = 500
#: Watches are reopened every 5-10 minutes (spread, so they do not all end together).
WATCH_SECONDS: Final = (300, 600)
#: A list or watch that failed is tried again after this long, doubling up to the most
#: (backoff.py: jittered, and never before the API server's Retry-After).
FIRST_BACKOFF_SECONDS: Final = 2.0
MAX_BACKOFF_SECONDS: Final = 30.0
#: How often a watch of an optional resource the API server does not serve looks again.
ABSENT_RECHECK_SECONDS: Final = 30.0


class Store(Generic[T]):
    """The records of one kind, by job, as the last lists and watch events left them.

    Several watches may fill one store (TFJobs of both API groups, PodGroups of both gang
    schedulers): each record remembers its watch (`source`), so that a list replaces only
    its own watch's records, never another's.
    """

    def __init__(self) -> None:
        self._by_job: dict[JobKey, dict[str, T]] = {}
        self._job_of: dict[str, JobKey] = {}
        self._source_of: dict[str, str] = {}

    def get(self, key: JobKey) -> list[T]:
        return list(self._by_job.get(key, {}).values())

    def keys(self) -> list[JobKey]:
        return list(self._by_job)

    def put(self, uid: str, key: JobKey, record: T, source: str = "") -> set[JobKey]:
        """Stores a record; returns the jobs whose records changed."""
        if source:
            self._source_of[uid] = source
        changed: set[JobKey] = set()
        previous_key = self._job_of.get(uid)
        if previous_key is not None and previous_key != key:
            changed |= self.remove(uid)
        records = self._by_job.setdefault(key, {})
        if records.get(uid) != record:
            records[uid] = record
            self._job_of[uid] = key
            changed.add(key)
        return changed

    def remove(self, uid: str) -> set[JobKey]:
        self._source_of.pop(uid, None)
        key = self._job_of.pop(uid, None)
        if key is None:
            return set()
        records = self._by_job[key]
        del records[uid]
        if not records:
            del self._by_job[key]
        return {key}

    def replace(
        self, namespace: str | None, entries: Iterable[tuple[str, JobKey, T]], source: str = ""
    ) -> set[JobKey]:
        """Makes the records of `source` in `namespace` (None: all) exactly `entries`, as
        after a list."""
        listed = {uid: (key, record) for uid, key, record in entries}
        changed: set[JobKey] = set()
        for uid, key in list(self._job_of.items()):
            if (
                (namespace is None or key[0] == namespace)
                and uid not in listed
                and self._source_of.get(uid, "") == source
            ):
                changed |= self.remove(uid)
        for uid, (key, record) in listed.items():
            changed |= self.put(uid, key, record, source)
        return changed


class Watch(Generic[T]):
    """Keeps `store` in step with one resource in one namespace (or all) and reports changes."""

    def __init__(
        self,
        api: ApiServerClient,
        resource: Resource,
        namespace: str | None,
        store: Store[T],
        read: Callable[[Mapping[str, Any]], tuple[str, JobKey, T] | None],
        changed: Callable[[JobKey], None],
        restarted: Callable[[str], None] = lambda _: None,
        deleted: Callable[[JobKey, T], None] | None = None,
    ) -> None:
        """`deleted`, if given, is shown the record read from a DELETED event: the
        object's last state, which the store drops."""
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.store = store
        self.read = read
        self.changed = changed
        self.restarted = restarted
        self.deleted = deleted
        self.synced = asyncio.Event()
        self._maybe_served = asyncio.Event()
        self.path = collection_path(namespace, resource.plural, resource.group_path)
        self.describe = f"{resource.name} in {namespace or 'all namespaces'}"
        #: The version a watch resumes from: the last one seen.
        self._version = ""

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                self._maybe_served.clear()
                version = await self._list()
                self.synced.set()
                failures = 0
                if version is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._maybe_served.wait(), ABSENT_RECHECK_SECONDS)
                    continue
                await self._watch(version)
                self.restarted(WatchCause.RELIST)
                logger.info("watch of %s expired (410 Gone): listing again", self.describe)
            except (aiohttp.ClientError, TimeoutError, ApiError, ValueError) as error:
                failures += 1
                await self._back_off(error, failures, "listing again")

    def recheck(self) -> None:
        """The resource may be served now (the operator has just created an object of it):
        if its last list found it absent, list again at once rather than at the next
        recheck. A gang scheduler or Kueue installed after the operator started is then
        seen with the first object the operator makes for it, not up to
        ABSENT_RECHECK_SECONDS later, while the operator cannot see what it made."""
        self._maybe_served.set()

    def _params(self, **extra: str) -> dict[str, str]:
        params = dict(extra)
        if self.resource.label_selector:
            params["labelSelector"] = self.resource.label_selector
        if self.resource.field_selector:
            params["fieldSelector"] = self.resource.field_selector
        return params

    async def _list(self) -> str | None:
        """Lists into the store; returns the version to watch from, None for an optional
        resource the server does not serve."""
        entries: list[tuple[str, JobKey, T]] = []
        token = ""
        while True:
            params = self._params(limit=str(LIST_PAGE_SIZE))
            if token:
                params["continue"] = token
            status, payload = await self.api.request(
                "GET", self.path, params=params, limit_seconds=120
            )
            if status == 404 and self.resource.optional:
                entries, version = [], None
                break
            raise_for(status, f"list {self.describe}", payload)
            page = orjson.loads(payload)
            entries.extend(e for e in map(self.read, page.get("items") or []) if e is not None)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or ""
            if not token:
                version = str(metadata["resourceVersion"])
                break
        for key in sorted(self.store.replace(self.namespace, entries, self.resource.name)):
            self.changed(key)
        return version

    async def _watch(self, version: str) -> None:
        """Follows the watch until the server says the version is gone (410): when a watch
        ends, or fails in a way that passes (the API server restarting, unreachable,
        throttling), it resumes from the last version seen, after a back-off for a
        failure, as client-go's reflector does; a relist of everything is for 410 only."""
        self._version = version
        failures = 0
        while True:
            try:
                if not await self._follow():
                    return
                failures = 0
                self.restarted(WatchCause.RESUME)
            except (aiohttp.ClientError, TimeoutError, ApiError) as error:
                if not (unavailable(error) or _forbidden(error)):
                    raise
                failures += 1
                await self._back_off(error, failures, f"resuming from version {self._version}")

    async def _back_off(self, error: Exception, failures: int, then: str) -> None:
        """Waits after the `failures`-th failure in a row, `error` the last; `then` says
        what comes next."""
        delay = delay_after(error, failures, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)
        self.restarted(WatchCause.ERROR)
        logger.warning("watch of %s failed (%s); %s in %.0fs", self.describe, error, then, delay)
        await asyncio.sleep(delay)

    async def _follow(self) -> bool:
        """One watch from `_version`, kept up to date as events come; False once the
        server says that version is gone (410)."""
        seconds = random.randint(*WATCH_SECONDS)
        params = self._params(
            watch="1",
            resourceVersion=self._version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(seconds),
        )
        events = self.api.watch(self.path, params, seconds + 30, f"watch {self.describe}")
        try:
            async with contextlib.aclosing(events):
                async for kind, body in events:
                    self._version = self._apply(kind, body, self._version)
        except WatchExpired:
            return False
        return True

    def _apply(self, kind: str, body: Mapping[str, Any], version: str) -> str:
        """Applies one watch event; returns the version to resume from."""
        version = str((body.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return version
        if kind == "DELETED":
            if self.deleted is not None and (last := self.read(body)) is not None:
                self.deleted(last[1], last[2])
            changed = self.store.remove(str(body["metadata"]["uid"]))
        else:
            entry = self.read(body)
            changed = self.store.put(*entry, self.resource.name) if entry is not None else set()
        for key in sorted(changed):
            self.changed(key)
        return version


def _forbidden(error: BaseException) -> bool:
    """A watch that was allowed a moment ago refused (403): an API server that has just
    restarted answers so until its authorizer has read the roles. Resumed like a failure
    that passes; a role really taken away refuses the list as well."""
    return isinstance(error, ApiError) and error.status == 403
