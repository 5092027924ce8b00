"""What the API server showed during the run: every TFJob, pod and service event, timed.

The harness watches the run's namespace from its own thread and event loop, through every
fault: a watch cut by an API server or etcd restart resumes from the last version it saw,
or lists again if that version has expired. A listing after an expiry can miss what came
and went in between; the journal counts such relists per resource, so a reader knows how
complete it is. Only what the checks read is kept of each object (`Seen`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness.apiclient import OUTAGE, SYNCED, ApiClient, EventHandler
from tfjob_operator.api import LABEL_GENERATION, LABEL_JOB_NAME, PLURAL, TFJOB_DEV

RESOURCES = ("tfjobs", "pods", "services")


@dataclass(frozen=True)
class Seen:
    """One object as one event showed it."""

    #: Seconds since the run's start.
    at: float
    resource: str
    #: ADDED (also: in a listing), MODIFIED or DELETED.
    event: str
    name: str
    uid: str
    #: The TFJob it belongs to (a TFJob's own name for a TFJob).
    job: str
    #: A TFJob's status.state, a pod's phase; empty for a service.
    state: str = ""
    #: A TFJob's status.restartCount.
    restarts: int = 0
    #: A pod's replica generation label.
    generation: str = ""
    deleting: bool = False
    #: A pod's container's exit code once it has exited: the kubelet reports it before it
    #: moves the pod's phase on (after the pod's sandbox is torn down), and the operator
    #: acts on it.
    exit_code: int | None = None
    #: Why a pod was taken away (its DisruptionTarget condition's reason: the node
    #: lifecycle controller's eviction is DeletionByTaintManager).
    disruption: str = ""
    #: A TFJob's Restarting condition, "reason: message", while it is True.
    restarting: str = ""


def seen(at: float, resource: str, event: str, obj: Mapping[str, Any]) -> Seen:
    """What the checks keep of one object."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    name = str(meta.get("name", ""))
    is_job, is_pod = resource == "tfjobs", resource == "pods"
    state = status.get("state") if is_job else status.get("phase") if is_pod else ""
    disrupted = _true_condition(status, "DisruptionTarget")
    restarting = _true_condition(status, "Restarting")
    return Seen(
        at=round(at, 3),
        resource=resource,
        event=event,
        name=name,
        uid=str(meta.get("uid", "")),
        job=name if is_job else str(labels.get(LABEL_JOB_NAME, "")),
        state=str(state or ""),
        restarts=int(status.get("restartCount") or 0) if is_job else 0,
        generation=str(labels.get(LABEL_GENERATION, "")) if is_pod else "",
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=_exit_code(status) if is_pod else None,
        disruption=str(disrupted.get("reason") or "") if is_pod else "",
        restarting=(
            f"{restarting.get('reason') or ''}: {restarting.get('message') or ''}"
            if is_job and restarting
            else ""
        ),
    )


def _true_condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition of type `kind` if it is True, else an empty mapping."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return {}


def _exit_code(status: Mapping[str, Any]) -> int | None:
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 0))
    return None


@dataclass
class Journal:
    """The run's records, appended from the watching thread, read from the main one."""

    records: list[Seen] = field(default_factory=list)
    #: Per resource: how often its watch could not go on (API server down), and how often
    #: it listed again after the first listing.
    outages: Counter[str] = field(default_factory=Counter)
    relists: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, record: Seen) -> None:
        with self._lock:
            self.records.append(record)

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.records)

    def job_states(self) -> dict[str, str]:
        """Each TFJob's latest state."""
        return {r.name: r.state for r in self.snapshot() if r.resource == "tfjobs"}


class Watcher:
    """Runs the journal's watches, and submits the run's jobs, in a thread of its own."""

    def __init__(self, kubeconfig: Path, namespace: str, journal: Journal, clock: float):
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.journal = journal
        self.clock = clock
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._client: ApiClient | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, submissions: list[tuple[float, dict[str, Any]]]) -> None:
        """Starts the watches and, at each given second of the run, creates that TFJob
        (again until the API server takes it: a submission during an outage waits)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(submissions), self._loop).result(60)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def check(self) -> None:
        """Raises the error of a watch or submission that stopped."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError(f"{task.get_name()} stopped") from task.exception()

    def paths(self) -> dict[str, str]:
        core = f"/api/v1/namespaces/{self.namespace}"
        return {
            "tfjobs": f"{TFJOB_DEV.path}/namespaces/{self.namespace}/{PLURAL}",
            "pods": f"{core}/pods",
            "services": f"{core}/services",
        }

    async def _start(self, submissions: list[tuple[float, dict[str, Any]]]) -> None:
        self._client = await ApiClient(self.kubeconfig).__aenter__()
        synced = {resource: asyncio.Event() for resource in RESOURCES}
        for resource, path in self.paths().items():
            watch = self._client.watch(
                path, self._handler(resource), synced[resource], outlast_outages=True
            )
            self._tasks.append(asyncio.create_task(watch, name=f"watch of {resource}"))
        for event in synced.values():
            await event.wait()
        self._tasks.append(asyncio.create_task(self._submit(submissions), name="submission"))

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.__aexit__(None, None, None)

    def _now(self) -> float:
        return time.monotonic() - self.clock

    def _handler(self, resource: str) -> EventHandler:
        listings = 0

        def handle(event: str, obj: dict[str, Any]) -> None:
            nonlocal listings
            if event == OUTAGE:
                self.journal.outages[resource] += 1
            elif event == SYNCED:
                listings += 1
                if listings > 1:
                    self.journal.relists[resource] += 1
            else:
                self.journal.add(seen(self._now(), resource, event, obj))

        return handle

    async def _submit(self, submissions: list[tuple[float, dict[str, Any]]]) -> None:
        assert self._client is not None
        path = self.paths()["tfjobs"]
        for at, body in sorted(submissions, key=lambda s: s[0]):
            await asyncio.sleep(max(0.0, at - self._now()))
            while True:
                try:
                    status, reply = await self._client.send("POST", path, body)
                except (aiohttp.ClientError, OSError) as error:
                    status, reply = 0, str(error)
                if status in (201, 409):  # 409: an earlier try was taken after all
                    break
                if status and status != 429 and status < 500:
                    raise RuntimeError(f"creating {body['metadata']['name']}: {status} {reply}")
                await asyncio.sleep(0.5)
