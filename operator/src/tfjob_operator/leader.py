"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Several operators may run (the chart runs two): one, the leader, reconciles; the others
keep their watch caches filled and wait, so that a new leader acts within seconds of
taking the Lease, not after a start-up.

- A candidate takes the Lease when no one holds it, or when its holder has not renewed it
  for the Lease's `leaseDurationSeconds` *as this candidate observed it*: the time is this
  process's own monotonic clock, from the moment it saw the record change, never the
  holder's timestamps (two machines' clocks differ). The Lease is watched, so that moment
  is when the change happened, and the candidate tries again when the lease would expire.
- Taking and renewing are updates with the resourceVersion read (optimistic
  concurrency): of two candidates, one succeeds.
- The leader renews every retry period; as client-go's, a renewal may be tried until the
  renew deadline from its start, and a leader that could not renew in that time stops
  leading. Its writes are fenced by the renew deadline after its last renewal that
  succeeded (`write_deadline`, which the API client reads as it sends each write and
  each retry of one, `kube.ApiServerClient.fence`): a write is sent only before it, and
  abandoned when it passes; a slow API server closes the fence for a while, not the
  leadership. A leader that finds the Lease lost abandons what is in flight at once, and
  exits, to come back as a candidate. The fence counts from when the last renewal was
  *sent*, and a standby counts the lease (15 s) from when it *saw* that renewal: between
  the leader's last possible write (10 s) and the earliest takeover lie at least 5 s.
  What this does not promise, as client-go's `leaderelection` does not: a request the
  API server had received before the deadline may still be carried out after it
  (docs/high-availability.md says which writes are safe even then).
- A leader that stops on purpose (SIGTERM: a rolling update, a drain, `kubectl delete
  pod`) gives the Lease up, and a standby takes it at once.
- Every change of holder this process sees is a log line naming the old and the new
  holder; the one that takes the Lease also records an event on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson

from .apiserver.aio import ApiServerClient, collection_path, raise_for, unavailable
from .apiserver.connection import SERVICE_ACCOUNT_DIR
from .apiserver.errors import ApiError
from .backoff import jittered
from .limits import LEASE_DURATION_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_PERIOD_SECONDS
from .metrics import Metrics
from .timeutil import now as wall_now
from .timeutil import to_micro_rfc3339, to_rfc3339

logger = logging.getLogger(__name__)

LEASES_PATH: Final = "/apis/coordination.k8s.io/v1"


class ElectionError(RuntimeError):
    """Leader election cannot run as configured; the message says why."""


@dataclass(frozen=True)
class Timings:
    """client-go's defaults."""

    lease_duration: float = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry_period: float = RETRY_PERIOD_SECONDS

    def check(self) -> None:
        """client-go's constraints: lease > renew deadline > retry period (with jitter)."""
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2 > 0:
            raise ElectionError(
                "leader election needs lease duration > renew deadline > 1.2 x retry period "
                f"(got {self.lease_duration:g}s, {self.renew_deadline:g}s, "
                f"{self.retry_period:g}s)"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads of a Lease."""

    holder: str
    lease_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> LeaseRecord:
        spec = body.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
        )

    @property
    def observable(self) -> tuple[str, str | None]:
        """What a change of counts as the holder being alive: its identity, its renewal."""
        return self.holder, self.renew_time


@dataclass(frozen=True)
class Election:
    """Leader election's settings (`tfjob-operator run --leader-elect`)."""

    namespace: str
    lease: str
    identity: str
    timings: Timings


def can_take(record: LeaseRecord | None, me: str, now: float, observed_at: float) -> bool:
    """Whether `me` may take (or keep) the Lease at monotonic time `now`, having last seen
    its record change at `observed_at` (client-go's rule)."""
    if record is None or record.holder in ("", me):
        return True
    return now >= observed_at + record.lease_seconds


def taken_spec(
    record: LeaseRecord | None, me: str, lease_seconds: int, at: datetime
) -> dict[str, Any]:
    """The Lease's spec once `me` has taken or renewed it at `at`."""
    keeps = record is not None and record.holder == me
    transitions = record.transitions if record is not None else 0
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": lease_seconds,
        "acquireTime": record.acquire_time if keeps and record else to_micro_rfc3339(at),
        "renewTime": to_micro_rfc3339(at),
        "leaseTransitions": transitions if keeps or record is None else transitions + 1,
    }


def released_spec(record: LeaseRecord, at: datetime) -> dict[str, Any]:
    """The Lease's spec given up by its holder: no holder, expiring at once."""
    moment = to_micro_rfc3339(at)
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": moment,
        "renewTime": moment,
        "leaseTransitions": record.transitions,
    }


def lease_object(
    namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace, "name": name}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": dict(spec),
    }


def default_identity() -> str:
    """The pod's name (downward API, POD_NAME), else this host and process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def default_namespace(service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> str | None:
    """The pod's namespace (POD_NAMESPACE, or its service account's)."""
    if namespace := os.environ.get("POD_NAMESPACE"):
        return namespace
    try:
        return (service_account_dir / "namespace").read_text().strip() or None
    except OSError:
        return None


class Elector:
    """One candidate for one Lease; `run()` returns when this candidate stops leading."""

    def __init__(
        self,
        api: ApiServerClient,
        namespace: str,
        name: str,
        identity: str,
        timings: Timings,
        metrics: Metrics,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = wall_now,
    ) -> None:
        timings.check()
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.metrics = metrics
        self.monotonic = monotonic
        self.wall = wall
        self.path = collection_path(namespace, "leases", LEASES_PATH)
        self.record: LeaseRecord | None = None
        self.observed_at = monotonic()
        #: When the last successful renewal (or the taking) was sent; writes are allowed
        #: until renew_deadline after it.
        self.renewed_at: float | None = None
        self.leading = asyncio.Event()
        self._seen = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()

    # -- what the watch of the Lease and the API client ask -----------------------------

    def observe(self, record: LeaseRecord | None) -> None:
        """The watch's view of the Lease changed (None: it was deleted)."""
        before = self.record
        if (record and record.observable) != (before and before.observable):
            self.observed_at = self.monotonic()
        if record is not None and (before is None or before.holder != record.holder):
            self.metrics.leader_transitions.set(record.transitions)
            if before is not None and record.holder not in ("", self.identity):
                logger.info(
                    "the Lease %s/%s is held by %s now (was %s)",
                    self.namespace,
                    self.name,
                    record.holder,
                    before.holder or "nobody",
                )
        self.record = record
        self._seen.set()

    def write_deadline(self) -> float:
        """Until when (monotonic) this process may send and await a write: the renew
        deadline after its last renewal while it leads; -inf when it does not."""
        if self.renewed_at is None:
            return -math.inf
        return self.renewed_at + self.timings.renew_deadline

    def may_write(self) -> bool:
        """Whether this process may send a write now: it leads, and renewed in time."""
        return self.monotonic() < self.write_deadline()

    # -- the election ---------------------------------------------------------------

    async def run(self) -> None:
        """Campaigns until this candidate leads, then renews until it cannot."""
        while not await self._attempt():
            await self._wait_for_a_chance()
        self.leading.set()
        self.metrics.leader.set(1)
        try:
            await self._renew()
        finally:
            self.metrics.leader.set(0)

    async def _wait_for_a_chance(self) -> None:
        """Until the Lease changes, may have expired, or a retry period has passed."""
        self._seen.clear()
        # Jittered, as client-go's: candidates that failed together do not retry together.
        wait = jittered(self.timings.retry_period)
        record = self.record
        if record is not None and record.holder not in ("", self.identity):
            expires = self.observed_at + record.lease_seconds - self.monotonic()
            # Until it expires; once it has, a try that failed is retried a period later.
            if expires > 0:
                wait = min(expires, self.timings.lease_duration)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._seen.wait(), wait)

    async def _attempt(self) -> bool:
        """`_try_take`, where an API server that cannot answer now is a lost attempt."""
        try:
            return await self._try_take()
        except (aiohttp.ClientError, OSError, TimeoutError, ApiError) as error:
            if not unavailable(error) and not isinstance(error, TimeoutError):
                raise
            logger.warning("taking the Lease %s/%s failed: %s", self.namespace, self.name, error)
            return False

    async def _try_take(self) -> bool:
        """One attempt to take the Lease; False if someone else holds it or won."""
        if not can_take(self.record, self.identity, self.monotonic(), self.observed_at):
            return False
        limit = self.timings.renew_deadline
        record = await self._read(limit)
        if not can_take(record, self.identity, self.monotonic(), self.observed_at):
            return False
        sent = self.monotonic()
        if not await self._write(
            record, taken_spec(record, self.identity, self._seconds, self.wall()), limit
        ):
            return False
        self.renewed_at = sent
        previous = record.holder if record is not None else ""
        logger.info(
            "%s took the Lease %s/%s from %s; leading",
            self.identity,
            self.namespace,
            self.name,
            previous or "nobody",
        )
        # Posted beside the election: leading never waits for an event.
        task = asyncio.create_task(self._event(previous))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return True

    async def _renew(self) -> None:
        """Renews every retry period, as client-go's: each renewal may be tried until the
        renew deadline from its start; returns once one could not be made in time, or the
        Lease is someone else's. Meanwhile writes stay fenced by the last renewal that
        succeeded (`write_deadline`), so a slow API server costs writes, not the Lease."""
        while True:
            await asyncio.sleep(self.timings.retry_period)
            why = await self._renew_within(self.monotonic() + self.timings.renew_deadline)
            if why is not None:
                break
        # From here on no write is sent, and none in flight is waited for.
        self.renewed_at = None
        self.api.abandon_writes()
        logger.error(
            "%s lost the Lease %s/%s: it %s, and stops leading (it writes nothing more)",
            self.identity,
            self.namespace,
            self.name,
            why,
        )

    async def _renew_within(self, deadline: float) -> str | None:
        """Tries to renew until `deadline` (monotonic), a retry period between tries; None
        once renewed, else why it could not."""
        while (left := deadline - self.monotonic()) > 0:
            try:
                if await asyncio.wait_for(self._renew_once(left), left):
                    return None
                holder = self.record.holder if self.record is not None else ""
                return f"finds it held by {holder or 'nobody'}"
            except (aiohttp.ClientError, OSError, TimeoutError, ApiError) as error:
                logger.warning(
                    "renewing the Lease %s/%s failed: %s", self.namespace, self.name, error
                )
            await asyncio.sleep(min(self.timings.retry_period, max(deadline - self.monotonic(), 0)))
        return f"could not renew it for {self.timings.renew_deadline:g}s (renew deadline)"

    async def _renew_once(self, left: float) -> bool:
        """One renewal, each request given what is `left` of the renew deadline (as
        client-go's renewal may use all of it); False if the Lease is no longer this
        candidate's."""
        sent = self.monotonic()
        until = sent + left
        record = self.record
        if record is None or record.holder != self.identity:
            record = await self._read(until - self.monotonic())
        while record is not None and record.holder == self.identity:
            spec = taken_spec(record, self.identity, self._seconds, self.wall())
            if await self._write(record, spec, until - self.monotonic()):
                self.renewed_at = sent
                return True
            # Another version than ours: read it, and renew from it if it is still ours.
            record = await self._read(until - self.monotonic())
        return False

    async def release(self) -> None:
        """Gives the Lease up, if this candidate holds it and still may write."""
        if not self.may_write() or self.record is None or self.record.holder != self.identity:
            return
        left = self.write_deadline() - self.monotonic()
        self.renewed_at = None
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            if await self._write(self.record, released_spec(self.record, self.wall()), left):
                logger.info("%s gave the Lease %s/%s up", self.identity, self.namespace, self.name)

    # -- requests -------------------------------------------------------------------------

    @property
    def _seconds(self) -> int:
        return round(self.timings.lease_duration)

    async def _read(self, limit: float) -> LeaseRecord | None:
        status, payload = await self.api.request(
            "GET", f"{self.path}/{self.name}", limit_seconds=limit
        )
        if status == 404:
            self.observe(None)
            return None
        raise_for(status, f"read Lease {self.namespace}/{self.name}", payload)
        record = LeaseRecord.from_body(orjson.loads(payload))
        self.observe(record)
        return record

    async def _write(
        self, record: LeaseRecord | None, spec: Mapping[str, Any], limit: float
    ) -> bool:
        """Creates or updates the Lease from `record`'s version within `limit` seconds;
        False on a conflict."""
        version = record.resource_version if record is not None else None
        body = orjson.dumps(lease_object(self.namespace, self.name, spec, version))
        if limit <= 0:
            raise TimeoutError(f"no time left to write the Lease {self.namespace}/{self.name}")
        if record is None:
            status, payload = await self.api.request(
                "POST", self.path, data=body, limit_seconds=limit
            )
        else:
            status, payload = await self.api.request(
                "PUT", f"{self.path}/{self.name}", data=body, limit_seconds=limit
            )
        if status == 409:
            return False
        raise_for(status, f"write Lease {self.namespace}/{self.name}", payload)
        self.observe(LeaseRecord.from_body(orjson.loads(payload)))
        return True

    async def _event(self, previous: str) -> None:
        """The event client-go's recorder posts on the Lease: `<identity> became leader`."""
        at = self.wall()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.name}.", "namespace": self.namespace},
            "involvedObject": {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "namespace": self.namespace,
                "name": self.name,
            },
            "reason": "LeaderElection",
            "message": f"{self.identity} became leader (the Lease was held by "
            f"{previous or 'nobody'})",
            "type": "Normal",
            "source": {"component": "tfjob-operator", "host": socket.gethostname()},
            "firstTimestamp": to_rfc3339(at),
            "lastTimestamp": to_rfc3339(at),
            "count": 1,
            "reportingComponent": "tfjob-operator",
            "reportingInstance": self.identity,
        }
        try:
            status, payload = await self.api.request(
                "POST", f"/api/v1/namespaces/{self.namespace}/events", data=orjson.dumps(event)
            )
            raise_for(status, "record the LeaderElection event", payload)
        except (OSError, RuntimeError) as error:
            logger.warning("could not record the LeaderElection event: %s", error)
