"""Runs `decide` for each TFJob whenever the job or one of its children changes.

The watch caches (watchcache.py) hold every TFJob, pod and service the operator manages;
the controller starts only once each has been filled from a full listing, so after a
restart the operator knows every child that exists before it creates one. A change only
wakes the job's worker: one asyncio task per TFJob that reconciles from the caches, one
reconcile at a time, so a burst of pod events costs one reconcile, not one per event. At
most `concurrent_reconciles` jobs reconcile at once.

Everything the controller does to the cluster goes through `Writes`, and every moment it
reads comes from `Clock`: tests drive it with fakes of both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from . import timeutil
from .api import JobRef
from .backoff import delay_after
from .children import ChildKind, Children, ChildWrites, Pending
from .decide import JobView, Plan, decide, decide_name_taken, name_order
from .errors import ApiError
from .events import NORMAL, WARNING, Event, EventSeries, event_object, repeat_patch
from .gang import USUAL_GANG_SCHEDULERS, GangSchedulers
from .kube import unavailable
from .limits import CONCURRENT_RECONCILES, INVALID_POD_GRACE_SECONDS
from .mergepatch import merge_patch
from .metrics import Metrics
from .observe import (
    FlavorObservation,
    PodGroupObservation,
    PodObservation,
    PriorityClass,
    ServiceObservation,
    WorkloadObservation,
    replica_from_labels,
)
from .queueing import default_priority, with_priority
from .refusals import Refusal, Refusals
from .spec import JobSpec
from .status import StatusWrite
from .tensorboard import BoardObservation, BoardPlan, plan_board
from .watchcache import JobKey, Store

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
#: A ResourceFlavor read for an admission is read again after this long.
FLAVOR_TTL_SECONDS: Final = 30.0
#: A job whose Workload names a priority class that does not exist looks again this often.
MISSING_CLASS_RETRY_SECONDS: Final = 10.0


class Writes(Protocol):
    """The controller's writes: children, prerequisites, status, events (kube.Kube)."""

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool: ...
    async def delete_service(self, namespace: str, name: str, uid: str) -> bool: ...
    async def create_deployment(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_deployment(self, namespace: str, name: str, uid: str) -> bool: ...
    async def create_network_policy(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_network_policy(self, namespace: str, name: str, uid: str) -> bool: ...
    async def delete_collection(
        self, namespace: str, plural: str, job_uid: str, keep: Collection[str]
    ) -> list[tuple[str, str]]: ...
    async def delete_job(self, job: JobRef) -> bool: ...
    async def create_pod_group(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def patch_pod_group(
        self, namespace: str, group: PodGroupObservation, patch: Mapping[str, Any]
    ) -> None: ...
    async def delete_pod_group(self, namespace: str, group: PodGroupObservation) -> bool: ...
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
    async def create_workload(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_workload(self, namespace: str, workload: WorkloadObservation) -> bool: ...
    async def patch_workload_status(
        self, namespace: str, workload: WorkloadObservation, patch: Mapping[str, Any]
    ) -> None: ...


class Reads(Protocol):
    """The reads the watches do not cover: the ResourceFlavors an admission names, and the
    priority of a Workload about to be made. They queue with the children's writes, since
    the job's pods wait on them."""

    async def read_resource_flavor(self, name: str) -> FlavorObservation | None: ...
    async def read_priority_class(self, kind: str, name: str) -> int | None: ...
    async def list_priority_classes(self) -> list[PriorityClass]: ...


class ApiAccess(Writes, Reads, Protocol):
    """What the controller asks of the API server beyond its watches (kube.Kube)."""


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
    #: Kueue's Workloads of queued jobs (queueing.py); empty where Kueue is not installed.
    workloads: Store[WorkloadObservation] = field(default_factory=Store)
    #: The PodGroups of gang-scheduled jobs, of both gang schedulers (gang.py).
    pod_groups: Store[PodGroupObservation] = field(default_factory=Store)
    #: The Deployments, Services and NetworkPolicies of jobs' TensorBoards (tensorboard.py).
    tensorboards: Store[BoardObservation] = field(default_factory=Store)


@dataclass
class Expectations:
    """Writes of this operator that the watch cache has not shown yet.

    Without them, a reconcile woken before the cache catches up would repeat a create
    (harmless but noisy: names are fixed, the server answers 409) or a delete, or decide
    from the status it has just replaced.
    """

    pods: Pending = field(default_factory=Pending)
    services: Pending = field(default_factory=Pending)
    #: resourceVersion of the TFJob our last status write replaced.
    replaced_version: str | None = None
    #: The TensorBoard's children created, by (kind, name), with when (tensorboard.py).
    created_boards: dict[tuple[str, str], float] = field(default_factory=dict)

    def creating_board(self, kind: str, name: str, now: float) -> bool:
        """False while a create of this TensorBoard child is recent enough that the
        watch may not show it yet; else records this one."""
        at = self.created_boards.get((kind, name))
        if at is not None and now - at < EXPECTATION_TTL_SECONDS:
            return False
        self.created_boards[(kind, name)] = now
        return True

    def skip_pending(
        self,
        plan: Plan,
        pods: Iterable[PodObservation],
        services: Iterable[ServiceObservation],
        now: float,
    ) -> None:
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
        plan.create_pods = [p for p in plan.create_pods if p.name not in self.pods.created]
        plan.create_services = [
            s for s in plan.create_services if s.name not in self.services.created
        ]
        plan.delete_pods = [d for d in plan.delete_pods if d.uid not in self.pods.deleted]
        plan.delete_services = [
            d for d in plan.delete_services if d.uid not in self.services.deleted
        ]


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
        gangs: GangSchedulers = USUAL_GANG_SCHEDULERS,
        invalid_grace_seconds: float = INVALID_POD_GRACE_SECONDS,
        tensorboard_image: str | None = None,
        served: Callable[[str], None] = lambda _: None,
    ) -> None:
        """`tensorboard_image` runs the TensorBoards of jobs that name no image. `served`
        is told the API version of each PodGroup or Workload the operator creates or finds
        existing: that API is served, and its watch must see it (Watch.recheck)."""
        self.writes: Writes = api
        self.reads: Reads = api
        self.served = served
        self.tensorboard_image = tensorboard_image
        self.caches = caches
        self.metrics = metrics
        self.cluster_domain = cluster_domain
        self.gangs = gangs
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
        #: ResourceFlavors read for admissions, with when they were read (monotonic).
        self._flavors: dict[str, tuple[float, FlavorObservation | None]] = {}

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
            self.metrics.job_state(key, None)
            return GONE
        job, younger = jobs[0], jobs[1:]
        for other in younger:
            if not await self._refuse_name(other, job.ref):
                return CONFLICT_RETRY_SECONDS
        expected = self._expected.setdefault(key, Expectations())
        if expected.replaced_version == job.resource_version:
            return CONFLICT_RETRY_SECONDS
        started = time.perf_counter()
        pods = self.caches.pods.get(key)
        services = self.caches.services.get(key)
        workloads = self.caches.workloads.get(key)
        refusals = self._refusals.setdefault(key, Refusals())
        plan = decide(
            job,
            pods,
            services,
            self.clock.now(),
            self.cluster_domain,
            workloads,
            pod_groups=self.caches.pod_groups.get(key),
            gangs=self.gangs,
            flavors=await self._admitted_flavors(job, workloads),
            refusals=list(refusals),
            invalid_grace_seconds=self.invalid_grace_seconds,
        )
        board = plan_board(
            job,
            job.parsed if isinstance(job.parsed, JobSpec) else None,
            plan.status if plan.status is not None else job.status,
            self.caches.tensorboards.get(key),
            self.clock.now(),
            self.tensorboard_image,
            self.cluster_domain,
        )
        _merge_board(job, plan, board)
        self._hold_back_while_refused(job, plan, refusals)
        expected.skip_pending(plan, pods, services, self.clock.monotonic())
        self._hold_back_progress(key, plan)
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
            self.metrics.job_state(key, plan.status["state"])
            self.metrics.restarts.inc(plan.restarts)
        else:
            self.metrics.job_state(key, job.status.get("state") or "Created")
        for event in plan.events:
            self._record(job, event)
        await self._apply_workload(job, plan)
        await self._apply_pod_groups(job, plan)
        await self._apply_children(job, plan, expected, pods, services, refusals)
        await self._apply_board(job, board, expected)
        if plan.delete_job and await self.writes.delete_job(job.ref):
            self._record(
                job,
                Event(
                    NORMAL, "TTLExpired", "Deleted the finished TFJob after ttlSecondsAfterFinished"
                ),
            )
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        plan.look_again_within(refusals.next_retry(self.clock.monotonic()))
        return plan.requeue_after

    async def _refuse_name(self, job: JobView, holder: JobRef) -> bool:
        """Fails `job`, whose name `holder` holds; False if its status changed meanwhile."""
        plan = decide_name_taken(job, holder, self.clock.now())
        if plan.status is None:
            return True
        patch = merge_patch(job.status, plan.status)
        if await self.writes.patch_status(job.ref, job.resource_version, patch, decision=True):
            for event in plan.events:
                self._record(job, event)
            return True
        return False

    def _hold_back_while_refused(self, job: JobView, plan: Plan, refusals: Refusals) -> None:
        """Creates nothing while a refused child the plan creates again waits for its retry,
        and forgets the refused children it no longer creates. The creates' slow start
        (children.py) stopped at that refusal; it starts again with the retry."""
        creates = (("pod", plan.create_pods), ("service", plan.create_services))
        refusals.keep_only([(kind, c.name) for kind, made in creates for c in made])
        if not refusals:
            return
        now = self.clock.monotonic()
        if any(
            refusals.backing_off((kind, c.name), job.generation, now)
            for kind, made in creates
            for c in made
        ):
            plan.create_pods, plan.create_services = [], []

    def _hold_back_progress(self, key: JobKey, plan: Plan) -> None:
        """Drops a status that only reports progress until it has waited its delay."""
        if plan.status is None:
            self._progress_since.pop(key, None)
            return
        if plan.status_write is not StatusWrite.PROGRESS:
            return
        now = self.clock.monotonic()
        wait = self._progress_since.setdefault(key, now) + PROGRESS_WRITE_DELAY_SECONDS - now
        if wait > 0:
            plan.status = None
            plan.look_again_within(wait)

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

    async def _admitted_flavors(
        self, job: JobView, workloads: Sequence[WorkloadObservation]
    ) -> dict[str, FlavorObservation]:
        """The ResourceFlavors the job's admitted Workload names, read at most every
        FLAVOR_TTL_SECONDS; one that does not exist is left out."""
        names = {
            name
            for w in workloads
            if w.owner_uid == job.ref.uid and w.admitted and not w.finished
            for names in w.flavors.values()
            for name in names
        }
        now = self.clock.monotonic()
        for name in names:
            read = self._flavors.get(name)
            if read is None or now - read[0] > FLAVOR_TTL_SECONDS:
                self._flavors[name] = (now, await self.reads.read_resource_flavor(name))
        return {name: flavor for name in names if (flavor := self._flavors[name][1]) is not None}

    async def _apply_workload(self, job: JobView, plan: Plan) -> None:
        """The plan's writes to the job's Kueue Workload (queueing.py)."""
        namespace = job.ref.namespace
        for workload, why in plan.workload.delete:
            if await self.writes.delete_workload(namespace, workload):
                message = f"Deleted Workload {workload.name}: {why}"
                self._record(job, Event(NORMAL, "SuccessfulDeleteWorkload", message))
        if plan.workload.patch_status is not None:
            workload, patch = plan.workload.patch_status
            await self.writes.patch_workload_status(namespace, workload, patch)
        body = plan.workload.create
        if body is not None:
            ref = body["spec"].get("priorityClassRef")
            priority = await self._workload_priority(ref)
            if priority is None:
                assert ref is not None
                message = (
                    f"{ref['kind']} {ref['name']} does not exist: the job's Workload is made "
                    "once it does"
                )
                self._record(job, Event(WARNING, "FailedCreateWorkload", message))
                wait = MISSING_CLASS_RETRY_SECONDS
                plan.look_again_within(wait)
                return
            await self._create_prerequisite(
                job,
                with_priority(body, priority),
                self.writes.create_workload,
                missing="is Kueue installed? The job waits for its Workload",
                created=(
                    f"in LocalQueue {body['spec']['queueName']}: the job runs once Kueue admits it"
                ),
            )

    async def _workload_priority(
        self, ref: Mapping[str, str] | None
    ) -> tuple[Mapping[str, str] | None, int] | None:
        """The priority of a Workload about to be made, as Kueue reads it for the Workloads
        it makes: the value of the class `ref` names, else the cluster's default
        (queueing.default_priority). None if the class named does not exist; a class the
        operator may not read (a namespaced install) counts 0."""
        try:
            if ref is None:
                return default_priority(await self.reads.list_priority_classes())
            value = await self.reads.read_priority_class(ref["kind"], ref["name"])
        except ApiError as error:
            if error.status != 403:
                raise
            return ref, 0
        return None if value is None else (ref, value)

    async def _apply_pod_groups(self, job: JobView, plan: Plan) -> None:
        """The plan's PodGroup writes, done before its pods are created (gang.py)."""
        namespace = job.ref.namespace
        for group, why in plan.pod_group.delete:
            if await self.writes.delete_pod_group(namespace, group):
                message = f"Deleted PodGroup {group.name} ({group.api_version}): {why}"
                self._record(job, Event(NORMAL, "SuccessfulDeletePodGroup", message))
        if plan.pod_group.patch is not None:
            group, patch = plan.pod_group.patch
            await self.writes.patch_pod_group(namespace, group, patch)
        body = plan.pod_group.create
        if body is not None:
            await self._create_prerequisite(
                job,
                body,
                self.writes.create_pod_group,
                missing="is its gang scheduler installed? The job's pods wait for their PodGroup",
                created=f"for its {body['spec']['minMember']} pods: they are placed together",
            )

    async def _apply_board(self, job: JobView, board: BoardPlan, expected: Expectations) -> None:
        """The TensorBoard's deletions, then its creations (tensorboard.py). A create the
        API server refuses (no role for Deployments, a quota) is an event, not a failed
        reconcile: the job runs on, and the next reconcile tries again."""
        namespace = job.ref.namespace
        writes = {
            "Deployment": (self.writes.create_deployment, self.writes.delete_deployment),
            "Service": (self.writes.create_service, self.writes.delete_service),
            "NetworkPolicy": (
                self.writes.create_network_policy,
                self.writes.delete_network_policy,
            ),
        }
        for child in board.delete:
            expected.created_boards.pop((child.kind, child.name), None)
            deleted = await writes[child.kind][1](namespace, child.name, child.uid)
            if deleted and child.kind == "Deployment":
                message = f"Removed TensorBoard {child.name}: {board.why}"
                self._record(job, Event(NORMAL, "TensorBoardRemoved", message))
        for body in board.create:
            kind, name = body["kind"], body["metadata"]["name"]
            if not expected.creating_board(kind, name, self.clock.monotonic()):
                continue
            try:
                created = await writes[kind][0](namespace, body)
            except ApiError as error:
                expected.created_boards.pop((kind, name), None)
                if error.namespace_terminating:
                    return
                message = f"could not create the TensorBoard's {kind} {name}: {error}"
                self._record(job, Event(WARNING, "FailedCreateTensorBoard", message))
                if not error.refused:
                    raise
                logger.warning("tfjob %s/%s: %s", namespace, job.ref.name, message)
                continue
            if created and kind == "Deployment" and board.status is not None:
                message = (
                    f"Created TensorBoard {name}: it reads {board.status['logDir']} and serves "
                    f"at {board.status['url']} (`tfjob-operator tensorboard {job.ref.name}` "
                    "forwards a local port to it)"
                )
                self._record(job, Event(NORMAL, "TensorBoardCreated", message))

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
        self._record(job, Event(WARNING, refusal.condition_reason, refusal.describe(), name))
        (logger.warning if new else logger.debug)(
            "tfjob %s/%s: %s (retrying in %.0fs)",
            job.ref.namespace,
            job.ref.name,
            refusal.describe(),
            refusals.retry_in((kind, name), self.clock.monotonic()),
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


def _merge_board(job: JobView, plan: Plan, board: BoardPlan) -> None:
    """Puts the TensorBoard's status, events and next look into the job's plan."""
    status = plan.status if plan.status is not None else job.status
    if status.get("tensorboard") != board.status:
        merged = {k: v for k, v in status.items() if k != "tensorboard"}
        if board.status is not None:
            merged["tensorboard"] = board.status
        plan.status = merged
        if board.events and plan.status_write is StatusWrite.PROGRESS:
            # The status records what the events report: written with them at once, or
            # the next reconcile, reading the old status, would report it again.
            plan.status_write = StatusWrite.TRANSITION
    plan.events += board.events
    plan.look_again_within(board.requeue_after)
