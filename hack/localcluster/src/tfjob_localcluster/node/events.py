"""Kubernetes Events for pods, reported as kubelet reports them (source component kubelet)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from tfjob_localcluster.node.kube import ApiError, Kube
from tfjob_localcluster.node.status import now

Obj = dict[str, Any]
log = logging.getLogger(__name__)


def pod_event(
    pod: Obj, node: str, kind: str, reason: str, message: str, field_path: str | None = None
) -> Obj:
    metadata = pod["metadata"]
    involved: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
    }
    if field_path:
        involved["fieldPath"] = field_path
    timestamp = now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata['name']}.{secrets.token_hex(8)}",
            "namespace": metadata["namespace"],
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    }


class EventRecorder:
    """Posts events in the background; a failure to record one is logged, not raised."""

    def __init__(self, kube: Kube, node: str) -> None:
        self.kube = kube
        self.node = node
        self._tasks: set[asyncio.Task[None]] = set()

    def record(
        self,
        pod: Obj,
        kind: str,
        reason: str,
        message: str,
        container: str | None = None,
    ) -> None:
        field_path = f"spec.containers{{{container}}}" if container else None
        event = pod_event(pod, self.node, kind, reason, message, field_path)
        log.info(
            "event %s/%s %s: %s",
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            reason,
            message,
        )
        task = asyncio.create_task(self._post(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, event: Obj) -> None:
        namespace = event["metadata"]["namespace"]
        try:
            await self.kube.create(f"/api/v1/namespaces/{namespace}/events", event)
        except (ApiError, OSError) as error:
            log.warning("could not record event %s: %s", event["reason"], error)
