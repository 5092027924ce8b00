"""Runs `decide` for each TFJob whenever the job or one of its children changes.

The watch caches (watchcache.py) hold every TFJob, pod and service the operator manages;
the controller starts only once each has been filled from a full listing, so after a
restart the operator knows every child that exists before it creates one. A change only
wakes the job's worker: one asyncio task per TFJob that reconciles from the caches, one
reconcile at a time, so a burst of pod events costs one reconcile, not one per event. At
most `concurrent_reconciles` jobs reconcile at once.

Before each decision every integration observes the job (integrations/: what its watches
show, and what it reads beyond them); after the status write, the controller applies the
plan's writes in order: those of the integrations that stand before the pods, the pods and
services, then those of the integrations beside the job.

Everything the controller does to the cluster goes through `Writes`, and every moment it
reads comes from `Clock`: tests drive it with fakes of both.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from . import timeutil
from .api import JobRef
from .apiserver.aio import unavailable
from .apiserver.errors import ApiError
from .backoff import delay_after
from .children import ChildKind, Children, ChildWrites, Pending
from .decide import decide, decide_name_taken, name_order
from .events import NORMAL, WARNING, Event, EventSeries, event_object, repeat_patch
from .integrations.base import Integration, Observation, Stage
from .job_view import JobView
from .limits import CONCURRENT_RECONCILES, INVALID_POD_GRACE_SECONDS
from .logs import about_job
from .mergepatch import merge_patch
from .metrics import Metrics
from .observe import (
    PodObservation,
    ServiceObservation,
    replica_from_labels,
)
from .plan import Plan, soonest
from .refusals import Refusal, Refusals
from .resources import JobKey
from .status import StatusWrite
from .stops import LastStops
from .watchcache import Store

logger = logging.getLogger(__name__)

#: A status write lost to a newer version of the TFJob: decide again shortly, from the
#: newer object (its watch event normally arrives first and wakes the worker anyway).
CONFLICT_RETRY_SECONDS: Final = 0.5
#: A reconcile that failed is tried again after this long, doubling up to the most
#: (backoff.py: jittered, and never before the API server's Retry-After).
FIRST_ERROR_BACKOFF_SECONDS: Final = 2.0
MAX_ERROR_BACKOFF_SECONDS: Final = 60.0
EXPECTATION_TTL_SECONDS: Final = 30.0
#: Progress (see status.py) waits at most this long, so that one write carries the pod
#: counts and conditions of a busy second instead of one write per watch event.
PROGRESS_WRITE_DELAY_SECONDS: Final = 2.0


class Writes(Protocol):
    """The controller's writes: children, status, events (kube.Kube). The integrations
    declare theirs in their modules (integrations/)."""

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool: ...
    async def delete_service(self, namespace: str, name: str, uid: str) -> bool: ...
    async def delete_collection(
        self, namespace: str, plural: str, job_uid: str, keep: Collection[str]
    ) -> list[tuple[str, str]]: ...
    async def delete_job(self, job: JobRef) -> bool: ...
    async def patch_status(
        self,
        job: JobRef,
        resource_version: str,
        patch: Mapping[str, Any],
        *,
        decision: bool,
    ) -> str | None: ...
    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> str: ...
    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool: ...


class ApiAccess(Writes, Protocol):
    """What the controller asks of the API server beyond its watches (kube.Kube), the
    integrations' writes and reads included."""


class Clock(Protocol):
    def now(self) -> datetime: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def now(self) -> datetime:
        return timeutil.now()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass(frozen=True)
class Caches:
    jobs: Store[JobView]
    pods: Store[PodObservation]
    services: Store[ServiceObservation]
    #: What each integration's watches show, by the integration's name (integrations/).
    integrations: Mapping[str, Store[Any]] = field(default_factory=dict)
    #: The checkpoints deleted pods reported as they stopped (stops.py).
    stops: LastStops = field(default_factory=LastStops)

    def records(self, integration: Integration[Any, Any], key: JobKey) -> list[Any]:
        store = self.integrations.get(integration.name)
        return store.get(key) if store is not None else []

    def pod_deleted(self, key: JobKey, pod: PodObservation) -> None:
        """A pod's last state: the checkpoint it stopped at is kept while its job exists
        (a job deleted first has none kept: nothing would forget it)."""
        if pod.stopped is not None and pod.owner_uid and self.jobs.get(key):
            self.stops.note(key, pod.owner_uid, pod.stopped)


@dataclass
class Expectations:
    """Writes of this operator that the watch cache has not shown yet, one `Pending` per
    kind (children.py).

    Without them, a reconcile woken before the cache catches up would repeat a create
    (harmless but noisy: names are fixed, the server answers 409) or a delete, or decide
    from the status it has just replaced.
    """

    pods: Pending = field(default_factory=Pending)
    services: Pending = field(default_factory=Pending)
    #: resourceVersion of the TFJob our last status write replaced.
    replaced_version: str | None = None
    #: The integrations' children created, by kind (integrations/).
    integration_children: dict[str, Pending] = field(default_factory=dict)

    def creating_child(self, kind: str, name: str, now: float) -> bool:
        """False while a create of an integration's child is recent enough that the watch
        may not show it yet; else records this one."""
        pending = self.integration_children.setdefault(kind, Pending())
        at = pending.created.get(name)
        if at is not None and now - at < EXPECTATION_TTL_SECONDS:
            return False
        pending.created[name] = now
        return True

    def forget_create(self, kind: str, name: str) -> None:
        if kind in self.integration_children:
            self.integration_children[kind].created.pop(name, None)

    def skip_pending(
        self,
        plan: Plan,
        pods: Iterable[PodObservation],
        services: Iterable[ServiceObservation],
        now: float,
    ) -> Plan:
        """Forgets what the cache now shows (or what lapsed) and drops writes in flight."""
        lapsed = now - EXPECTATION_TTL_SECONDS
        for pending, seen in (
            (self.pods, {p.name for p in pods}),
            (self.services, {s.name for s in services}),
        ):
            for name in [n for n, at in pending.created.items() if n in seen or at < lapsed]:
                del pending.created[name]
        self.pods.deleted &= {p.uid for p in pods if not p.terminating}
        self.services.deleted &= {s.uid for s in services}
        return dataclasses.replace(
            plan,
            create_pods=tuple(p for p in plan.create_pods if p.name not in self.pods.created),
            create_services=tuple(
                s for s in plan.create_services if s.name not in self.services.created
            ),
            delete_pods=tuple(d for d in plan.delete_pods if d.uid not in self.pods.deleted),
            delete_services=tuple(
                d for d in plan.delete_services if d.uid not in self.services.deleted
            ),
        )


class _Gone:
    """The TFJob is no longer in the cache: its worker stops."""


GONE: Final = _Gone()


class Controller:
    def __init__(
        self,
        api: ApiAccess,
        caches: Caches,
        metrics: Metrics,
        cluster_domain: str | None,
        clock: Clock | None = None,
        instance: str = "tfjob-operator",
        concurrent_reconciles: int = CONCURRENT_RECONCILES,
        integrations: Sequence[Integration[Any, Any]] = (),
        invalid_grace_seconds: float = INVALID_POD_GRACE_SECONDS,
        served: Callable[[str], None] = lambda _: None,
    ) -> None:
        """`integrations` are asked and applied in their order (integrations/), their
        records read from `caches`. `served` is told the API version of each prerequisite
        (a PodGroup, a Workload) the operator creates or finds existing: that API is served,
        and its watch must see it (Watch.recheck)."""
        self.api = api
        self.writes: Writes = api
        self.served = served
        self.integrations = tuple(integrations)
        self.caches = caches
        self.metrics = metrics
        self.cluster_domain = cluster_domain
        self.invalid_grace_seconds = invalid_grace_seconds
        self.clock = clock or SystemClock()
        self.instance = instance
        self._workers: dict[JobKey, _JobWorker] = {}
        self._expected: dict[JobKey, Expectations] = {}
        #: Children of each job the API server refused (refusals.py).
        self._refusals: dict[JobKey, Refusals] = {}
        self._event_series = EventSeries()
        #: When a job's oldest progress not yet written was decided (monotonic).
        self._progress_since: dict[JobKey, float] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.reconcile_slots = asyncio.Semaphore(concurrent_reconciles)

    def notify(self, key: JobKey) -> None:
        """Something about job `key` changed: make sure it is reconciled soon."""
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = _JobWorker(key, self)
        worker.wake()

    async def stop(self) -> None:
        workers = list(self._workers.values())
        self._workers.clear()
        for worker in workers:
            worker.task.cancel()
        await asyncio.gather(*(w.task for w in workers), return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)

    async def reconcile(self, key: JobKey) -> float | _Gone | None:
        """One reconcile of one job; returns when to look again without an event."""
        jobs = sorted(self.caches.jobs.get(key), key=name_order)
        if not jobs:
            # No await between the lookup and the removal: a notify for a job that has just
            # come back finds no worker and starts a new one.
            self._workers.pop(key, None)
            self._expected.pop(key, None)
            self._refusals.pop(key, None)
            self._progress_since.pop(key, None)
            self.caches.stops.forget(key)
            self.metrics.job_deleted(key)
            return GONE
        job, younger = jobs[0], jobs[1:]
        about_job(job.ref)
        for other in younger:
            if not await self._refuse_name(other, job.ref):
                return CONFLICT_RETRY_SECONDS
        expected = self._expected.setdefault(key, Expectations())
        if expected.replaced_version == job.resource_version:
            return CONFLICT_RETRY_SECONDS
        started = time.perf_counter()
        pods = self.caches.pods.get(key)
        services = self.caches.services.get(key)
        refusals = self._refusals.setdefault(key, Refusals())
        observations = [
            Observation(
                integration,
                await integration.observe(
                    job, self.caches.records(integration, key), self.api, self.clock.monotonic()
                ),
            )
            for integration in self.integrations
        ]
        plan = decide(
            job,
            pods,
            services,
            self.clock.now(),
            self.cluster_domain,
            observations=observations,
            refusals=list(refusals),
            invalid_grace_seconds=self.invalid_grace_seconds,
            stopped=self.caches.stops.get(key, job.ref.uid),
        )
        plan = self._hold_back_while_refused(job, plan, refusals)
        plan = expected.skip_pending(plan, pods, services, self.clock.monotonic())
        plan = self._hold_back_progress(key, plan)
        if plan.status is not None:
            written = await self.writes.patch_status(
                job.ref,
                job.resource_version,
                merge_patch(job.status, plan.status),
                decision=plan.status_write is StatusWrite.DECISION,
            )
            if written is None:
                return CONFLICT_RETRY_SECONDS
            # A write that changed nothing keeps the version: the cache is not behind then.
            expected.replaced_version = (
                job.resource_version if written != job.resource_version else None
            )
            self._progress_since.pop(key, None)
            self.metrics.status_written(job, plan.status, plan.restarted, self.clock.now())
            self.metrics.job_state(key, plan.status["state"])
        else:
            self.metrics.job_state(key, job.status.get("state") or "Created")
        self._report(job, plan.events)
        host = _IntegrationHost(self, job, expected)
        look_again = plan.requeue_after
        for integration, writes in plan.integration_writes:
            if integration.stage is not Stage.BESIDE:
                look_again = soonest(look_again, await integration.apply(job, writes, host))
        await self._apply_children(job, plan, expected, pods, services, refusals)
        for integration, writes in plan.integration_writes:
            if integration.stage is Stage.BESIDE:
                look_again = soonest(look_again, await integration.apply(job, writes, host))
        if plan.delete_job and await self.writes.delete_job(job.ref):
            self._record(
                job,
                Event(
                    NORMAL, "TTLExpired", "Deleted the finished TFJob after ttlSecondsAfterFinished"
                ),
            )
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        return soonest(look_again, refusals.next_retry(self.clock.monotonic()))

    async def _refuse_name(self, job: JobView, holder: JobRef) -> bool:
        """Fails `job`, whose name `holder` holds; False if its status changed meanwhile."""
        plan = decide_name_taken(job, holder, self.clock.now())
        if plan.status is None:
            return True
        patch = merge_patch(job.status, plan.status)
        if await self.writes.patch_status(job.ref, job.resource_version, patch, decision=True):
            # Another TFJob than the one the job's key counts the state of: its transitions
            # count, its state does not.
            self.metrics.status_written(job, plan.status, (), self.clock.now())
            self._report(job, plan.events)
            return True
        return False

    def _hold_back_while_refused(self, job: JobView, plan: Plan, refusals: Refusals) -> Plan:
        """Creates nothing while a refused child the plan creates again waits for its retry,
        and forgets the refused children it no longer creates. The creates' slow start
        (children.py) stopped at that refusal; it starts again with the retry."""
        creates = (("pod", plan.create_pods), ("service", plan.create_services))
        refusals.keep_only([(kind, c.name) for kind, made in creates for c in made])
        if not refusals:
            return plan
        now = self.clock.monotonic()
        if any(
            refusals.backing_off((kind, c.name), job.generation, now)
            for kind, made in creates
            for c in made
        ):
            return dataclasses.replace(plan, create_pods=(), create_services=())
        return plan

    def _hold_back_progress(self, key: JobKey, plan: Plan) -> Plan:
        """Drops a status that only reports progress until it has waited its delay."""
        if plan.status is None:
            self._progress_since.pop(key, None)
            return plan
        if plan.status_write is not StatusWrite.PROGRESS:
            return plan
        now = self.clock.monotonic()
        wait = self._progress_since.setdefault(key, now) + PROGRESS_WRITE_DELAY_SECONDS - now
        if wait > 0:
            return dataclasses.replace(plan, status=None).looking_again_within(wait)
        return plan

    def _report(self, job: JobView, events: Iterable[Event]) -> None:
        """A decision's events: the job's transitions, in the log as in its events
        (`decide` reports each once)."""
        for event in events:
            level = logging.WARNING if event.type == WARNING else logging.INFO
            logger.log(level, "%s: %s", event.reason, event.message, extra={"job": job.ref})
            self._record(job, event)

    def _record(self, job: JobView, event: Event) -> None:
        """Posts an event without waiting for it: events never hold up a decision. A repeat
        counts up the Event it repeats (events.py)."""
        self._spawn(self._post_event(job, event, self.clock.now()))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post_event(self, job: JobView, event: Event, now: datetime) -> None:
        namespace = job.ref.namespace
        series = self._event_series.of(job.ref.uid, event, self.clock.monotonic())
        async with series.lock:
            series.count += 1
            try:
                if series.name is not None and await self.writes.patch_event(
                    namespace, series.name, repeat_patch(event, series.count, now)
                ):
                    return
                body = event_object(job.ref, job.resource_version, event, now, self.instance)
                series.name = await self.writes.create_event(namespace, body)
                series.count = 1
            except Exception as error:  # an event lost is logged, never retried
                quiet = isinstance(error, ApiError) and error.namespace_terminating
                (logger.debug if quiet else logger.warning)(
                    "could not record event %s: %s", event.reason, error
                )

    async def _create_prerequisite(
        self,
        job: JobView,
        body: Mapping[str, Any],
        create: Callable[[str, Mapping[str, Any]], Awaitable[bool]],
        *,
        missing: str,
        created: str,
    ) -> None:
        """Creates an object the job's pods wait for (a Kueue Workload, a PodGroup) and says
        so in an event. A failure is an event too, and raised: the job is tried again with
        backoff. `missing` says what to check when the object's API is not served; `created`
        ends the event of an object created."""
        kind, name = body["kind"], body["metadata"]["name"]
        try:
            made = await create(job.ref.namespace, body)
        except ApiError as error:
            message = str(error)
            if error.status == 404:
                message = f"{body['apiVersion']} is not served: {missing} ({message})"
            self._record(job, Event(WARNING, f"FailedCreate{kind}", message))
            raise
        self.served(body["apiVersion"])
        if made:
            message = f"Created {kind} {name} ({body['apiVersion']}) {created}"
            self._record(job, Event(NORMAL, f"SuccessfulCreate{kind}", message))

    async def _apply_children(
        self,
        job: JobView,
        plan: Plan,
        expected: Expectations,
        pods: Sequence[PodObservation],
        services: Sequence[ServiceObservation],
        refusals: Refusals,
    ) -> None:
        """The plan's creates and deletes of the job's pods and services (children.py)."""
        await ChildWrites(job.ref, _ChildrenHost(self, job, refusals)).apply(
            [
                Children(
                    ChildKind(
                        "pod",
                        self.writes.create_pod,
                        self.writes.delete_pod,
                        self.metrics.pods_created,
                        self.metrics.pods_deleted,
                    ),
                    plan.create_pods,
                    plan.delete_pods,
                    expected.pods,
                    {p.name for p in pods},
                ),
                Children(
                    ChildKind(
                        "service",
                        self.writes.create_service,
                        self.writes.delete_service,
                        self.metrics.services_created,
                    ),
                    plan.create_services,
                    plan.delete_services,
                    expected.services,
                    {s.name for s in services},
                ),
            ]
        )

    def _refused(
        self,
        job: JobView,
        kind: str,
        child: Mapping[str, Any],
        error: ApiError,
        refusals: Refusals,
    ) -> None:
        """Remembers a refused child for `decide`, and says so in an event, aggregated per
        child, and in one log line when the refusal is new: an expected user error, not a
        traceback."""
        name = child["metadata"]["name"]
        replica = replica_from_labels(child["metadata"].get("labels") or {})
        first = Refusal(
            kind,
            replica.key if replica else name,
            error.status,
            error.reason,
            error.detail,
            job.generation,
            self.clock.now(),
            1,
        )
        refusal, new = refusals.record(first, name, self.clock.monotonic())
        self.metrics.refused(job.ref.namespace, kind, error.reason)
        self._record(job, Event(WARNING, refusal.condition_reason, refusal.describe(), name))
        (logger.warning if new else logger.debug)(
            "%s: %s (retrying in %.0fs)",
            refusal.condition_reason,
            refusal.describe(),
            refusals.retry_in((kind, name), self.clock.monotonic()),
            extra={"replica": refusal.replica},
        )


class _ChildrenHost:
    """The controller, for one job's children writes (children.py)."""

    def __init__(self, controller: Controller, job: JobView, refusals: Refusals) -> None:
        self.controller = controller
        self.job = job
        self.refusals = refusals

    def record(self, event: Event) -> None:
        self.controller._record(self.job, event)

    def accepted(self, noun: str, name: str) -> None:
        self.refusals.accepted((noun, name))

    def refused(self, noun: str, child: Mapping[str, Any], error: ApiError) -> None:
        self.controller._refused(self.job, noun, child, error, self.refusals)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.controller._spawn(work)

    def decide_again(self) -> None:
        self.controller.notify((self.job.ref.namespace, self.job.ref.name))

    def monotonic(self) -> float:
        return self.controller.clock.monotonic()

    async def delete_collection(self, plural: str, keep: Collection[str]) -> list[tuple[str, str]]:
        ref = self.job.ref
        return await self.controller.writes.delete_collection(ref.namespace, plural, ref.uid, keep)


class _IntegrationHost:
    """The controller, for one job's integrations' writes (integrations/base.Host)."""

    def __init__(self, controller: Controller, job: JobView, expected: Expectations) -> None:
        self.controller = controller
        self.job = job
        self.expected = expected

    @property
    def api(self) -> Any:
        return self.controller.api

    def record(self, event: Event) -> None:
        self.controller._record(self.job, event)

    def record_deleted(self, kind: str, name: str, why: str) -> None:
        self.record(Event(NORMAL, f"SuccessfulDelete{kind}", f"Deleted {kind} {name}: {why}"))

    def creating(self, kind: str, name: str) -> bool:
        return self.expected.creating_child(kind, name, self.controller.clock.monotonic())

    def forget_create(self, kind: str, name: str) -> None:
        self.expected.forget_create(kind, name)

    async def create_prerequisite(
        self,
        body: Mapping[str, Any],
        create: Callable[[str, Mapping[str, Any]], Awaitable[bool]],
        *,
        missing: str,
        created: str,
    ) -> None:
        await self.controller._create_prerequisite(
            self.job, body, create, missing=missing, created=created
        )


class _JobWorker:
    """Reconciles one job whenever woken, or when its next deadline comes."""

    def __init__(self, key: JobKey, controller: Controller) -> None:
        self.key = key
        self.controller = controller
        self._wakeup = asyncio.Event()
        #: When the oldest change no reconcile has seen yet woke the worker (monotonic).
        self._woken_at: float | None = None
        self.task = asyncio.create_task(self._run(), name=f"tfjob {key[0]}/{key[1]}")

    def wake(self) -> None:
        if self._woken_at is None:
            self._woken_at = self.controller.clock.monotonic()
        self._wakeup.set()

    def _starting(self) -> None:
        """A reconcile starts: it sees every change so far, so their wait ends here."""
        if self._woken_at is not None:
            waited = self.controller.clock.monotonic() - self._woken_at
            self.controller.metrics.queue_wait_seconds.observe(waited)
            self._woken_at = None

    async def _run(self) -> None:
        delay: float | None = None
        errors = 0
        while True:
            if delay is None:
                await self._wakeup.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), delay)
            self._wakeup.clear()
            try:
                async with self.controller.reconcile_slots:
                    self._starting()
                    outcome = await self.controller.reconcile(self.key)
            except Exception as error:
                errors += 1
                delay = delay_after(
                    error, errors, FIRST_ERROR_BACKOFF_SECONDS, MAX_ERROR_BACKOFF_SECONDS
                )
                self.controller.metrics.reconcile_errors.inc()
                if unavailable(error):
                    logger.warning(
                        "reconcile of tfjob %s/%s failed: %s; retrying in %.0fs",
                        *self.key,
                        error,
                        delay,
                    )
                else:
                    logger.exception(
                        "reconcile of tfjob %s/%s failed; retrying in %.0fs", *self.key, delay
                    )
                continue
            errors = 0
            if isinstance(outcome, _Gone):
                return
            delay = outcome
