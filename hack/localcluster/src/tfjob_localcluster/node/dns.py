"""Cluster DNS for the process node: keeps every pod's hosts file current.

Watches Services and EndpointSlices with its own identity (as CoreDNS would) and
rewrites the registered hosts files when the records change.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfjob_localcluster.node.hosts import Record, render, service_records, write_in_place
from tfjob_localcluster.node.informer import Informer
from tfjob_localcluster.node.kube import Kube

Obj = dict[str, Any]
log = logging.getLogger(__name__)

# Changes arriving this close together are written once.
COALESCE_SECONDS = 0.05


@dataclass
class HostsFile:
    path: Path
    namespace: str
    ip: str
    names: list[str]
    aliases: list[Obj] = field(default_factory=list)

    def content(self, records: list[Record]) -> str:
        return render(self.ip, self.names, self.namespace, records, self.aliases)


class ClusterDns:
    def __init__(self, kube: Kube, cluster_domain: str) -> None:
        self.cluster_domain = cluster_domain
        self.records: list[Record] = []
        self._files: dict[str, HostsFile] = {}
        self._changed = asyncio.Event()
        self._services = Informer(kube, "/api/v1/services", self._on_change)
        self._slices = Informer(kube, "/apis/discovery.k8s.io/v1/endpointslices", self._on_change)

    async def run(self) -> None:
        await asyncio.gather(self._services.run(), self._slices.run(), self._write_loop())

    async def synced(self) -> None:
        await self._services.synced.wait()
        await self._slices.synced.wait()

    def register(self, uid: str, hosts: HostsFile) -> None:
        """Adds a pod's hosts file and writes it now (before its containers start)."""
        self._files[uid] = hosts
        write_in_place(hosts.path, hosts.content(self.records))

    def unregister(self, uid: str) -> None:
        self._files.pop(uid, None)

    def _on_change(self, _kind: str, _obj: Obj) -> None:
        self._changed.set()

    async def _write_loop(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(COALESCE_SECONDS)
            self._changed.clear()
            records = service_records(
                self._services.cache.values(), self._slices.cache.values(), self.cluster_domain
            )
            if records == self.records:
                continue
            self.records = records
            files = list(self._files.values())
            try:
                await asyncio.to_thread(_rewrite, files, records)
            except OSError as error:
                log.warning("could not rewrite hosts files: %s", error)


def _rewrite(files: list[HostsFile], records: list[Record]) -> None:
    for hosts in files:
        try:
            write_in_place(hosts.path, hosts.content(records))
        except FileNotFoundError:
            continue  # the pod's sandbox was removed meanwhile
