"""List-then-watch a collection, keeping a cache and reporting every change.

The handler sees ("ADDED" | "MODIFIED" | "DELETED", object). After a relist (the watch
expired or failed) the cache is reconciled against the fresh list, so the handler
still sees every deletion and change it missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tfjob_localcluster.node.kube import ApiError, Kube, Obj

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj], None]


def object_key(obj: Obj) -> str:
    metadata = obj["metadata"]
    return f"{metadata.get('namespace', '')}/{metadata['name']}"


class Informer:
    def __init__(self, kube: Kube, path: str, handler: Handler, **query: str) -> None:
        self.kube = kube
        self.path = path
        self.query = query
        self.handler = handler
        self.cache: dict[str, Obj] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        failures = 0
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    resource_version = await self._relist()
                resource_version = await self._watch(resource_version)
                failures = 0
            except ApiError as error:
                resource_version = None
                if error.status != 410:
                    log.warning("watch %s failed: %s", self.path, error)
                    failures += 1
            except (TimeoutError, OSError, ValueError) as error:
                resource_version = None
                log.warning("watch %s interrupted: %s", self.path, error)
                failures += 1
            if failures:
                await asyncio.sleep(min(0.5 * 2**failures, 10))

    async def _relist(self) -> str:
        listed = await self.kube.get(self.path, **self.query)
        fresh = {object_key(item): item for item in listed.get("items", [])}
        for key in list(self.cache):
            if key not in fresh:
                self._dispatch("DELETED", self.cache.pop(key))
        for key, item in fresh.items():
            previous = self.cache.get(key)
            self.cache[key] = item
            if previous is None:
                self._dispatch("ADDED", item)
            elif previous["metadata"].get("resourceVersion") != item["metadata"].get(
                "resourceVersion"
            ):
                self._dispatch("MODIFIED", item)
        self.synced.set()
        return str(listed["metadata"]["resourceVersion"])

    async def _watch(self, resource_version: str) -> str:
        """Applies events until the server ends the watch; returns where to resume."""
        async for event in self.kube.watch(self.path, resource_version, **self.query):
            kind, obj = event["type"], event["object"]
            if kind != "ERROR":
                resource_version = obj["metadata"]["resourceVersion"]
            if kind == "BOOKMARK":
                continue
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("message", obj)))
            key = object_key(obj)
            if kind == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = obj
            self._dispatch(kind, obj)
        return resource_version

    def _dispatch(self, kind: str, obj: Obj) -> None:
        try:
            self.handler(kind, obj)
        except Exception:
            log.exception("handler for %s %s failed", kind, object_key(obj))
