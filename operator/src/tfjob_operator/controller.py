"""Runs `decide` for each TFJob whenever the job or one of its children changes.

kopf watches TFJobs, pods and services and keeps them in indexes (watch caches); kopf
fills every index from a full listing before any handler runs, so after a restart the
operator knows every child that exists before it creates one. Every watch event only wakes
the job's worker: one asyncio task per TFJob that reconciles from the indexes, one reconcile
at a time, so a burst of pod events costs one reconcile, not one per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, cast

import kopf

from . import timeutil
from .api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from .decide import NORMAL, WARNING, JobView, Plan, decide
from .kube import ApiError, Kube
from .mergepatch import merge_patch
from .metrics import Metrics
from .observe import observe_pod, observe_service

logger = logging.getLogger(__name__)

JobKey = tuple[str, str]
#: A status write lost to a newer version of the TFJob: decide again shortly, from the
#: newer object (its watch event normally arrives first and wakes the worker anyway).
CONFLICT_RETRY_SECONDS: Final = 0.5
MAX_ERROR_BACKOFF_SECONDS: Final = 60.0
EXPECTATION_TTL_SECONDS: Final = 30.0
_UNREAD_METADATA: Final = frozenset({"managedFields", "annotations"})


@dataclass(frozen=True)
class Indexes:
    jobs: Mapping[JobKey, Iterable[kopf.Body]]
    pods: Mapping[JobKey, Iterable[Any]]
    services: Mapping[JobKey, Iterable[Any]]


@dataclass
class _Expectations:
    """Writes of this operator that the watch cache has not shown yet.

    Without them, a reconcile woken before the cache catches up would repeat a create
    (harmless but noisy: names are fixed, the server answers 409) or a delete, or decide
    from the status it has just replaced.
    """

    #: Names created, with the monotonic time of the create: the cache may never show a
    #: pod that was deleted right after, so an expectation lapses after a while.
    created_pods: dict[str, float] = field(default_factory=dict)
    created_services: dict[str, float] = field(default_factory=dict)
    deleted_pods: set[str] = field(default_factory=set)
    deleted_services: set[str] = field(default_factory=set)
    #: resourceVersion of the TFJob our last status write replaced.
    replaced_version: str | None = None


class _Gone:
    """The TFJob is no longer in the cache: its worker stops."""


GONE: Final = _Gone()


class Controller:
    def __init__(self, kube: Kube, metrics: Metrics, cluster_domain: str | None) -> None:
        self.kube = kube
        self.metrics = metrics
        self.cluster_domain = cluster_domain
        self.indexes: Indexes | None = None
        self._workers: dict[JobKey, _JobWorker] = {}
        self._expected: dict[JobKey, _Expectations] = {}

    def notify(self, key: JobKey, indexes: Indexes) -> None:
        """Something about job `key` changed: make sure it is reconciled soon."""
        self.indexes = indexes
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

    async def reconcile(self, key: JobKey) -> float | _Gone | None:
        """One reconcile of one job; returns when to look again without an event."""
        assert self.indexes is not None
        body = next(iter(self.indexes.jobs.get(key, ())), None)
        if body is None:
            # No await between the lookup and the removal: a notify for a job that has just
            # come back finds no worker and starts a new one.
            self._workers.pop(key, None)
            self._expected.pop(key, None)
            self.metrics.job_state(key, None)
            return GONE
        resource_version = body["metadata"]["resourceVersion"]
        expected = self._expected.setdefault(key, _Expectations())
        if expected.replaced_version == resource_version:
            return CONFLICT_RETRY_SECONDS
        started = time.perf_counter()
        job = JobView.from_body(body)
        pods = list(self.indexes.pods.get(key, ()))
        services = list(self.indexes.services.get(key, ()))
        plan = decide(job, pods, services, timeutil.now(), self.cluster_domain)
        _skip_expected(plan, expected, pods, services)
        if plan.status is not None:
            written = await self.kube.patch_status(
                job.ref.namespace,
                job.ref.name,
                resource_version,
                merge_patch(job.status, plan.status),
            )
            if written is None:
                return CONFLICT_RETRY_SECONDS
            # A write that changed nothing keeps the version: the cache is not behind then.
            expected.replaced_version = resource_version if written != resource_version else None
            self.metrics.job_state(key, plan.status["state"])
            if any(e.reason == "TFJobRestarting" for e in plan.events):
                self.metrics.restarts.inc()
        else:
            self.metrics.job_state(key, job.status.get("state") or "Created")
        for event in plan.events:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        await self._apply_children(body, job, plan, expected)
        if plan.delete_job and await self.kube.delete_job(
            job.ref.namespace, job.ref.name, job.ref.uid
        ):
            kopf.event(
                body,
                type=NORMAL,
                reason="TTLExpired",
                message="Deleted the finished TFJob after ttlSecondsAfterFinished",
            )
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        return plan.requeue_after

    async def _apply_children(
        self, body: kopf.Body, job: JobView, plan: Plan, expected: _Expectations
    ) -> None:
        """Creates and deletes children concurrently; one event per kind of action.

        Events name every child an action touched rather than one event per child: a
        job of a hundred workers gets a readable `kubectl describe`, and the API server
        half the requests.
        """
        namespace = job.ref.namespace
        done: dict[tuple[str, str], list[str]] = defaultdict(list)

        async def delete_pod(name: str, uid: str, why: str) -> None:
            expected.deleted_pods.add(uid)
            if await self.kube.delete_pod(namespace, name, uid):
                self.metrics.pods_deleted.inc()
                done[("SuccessfulDeletePod", f"Deleted pods {{}}: {why}")].append(name)

        async def delete_service(name: str, uid: str, why: str) -> None:
            expected.deleted_services.add(uid)
            if await self.kube.delete_service(namespace, name, uid):
                done[("SuccessfulDeleteService", f"Deleted services {{}}: {why}")].append(name)

        async def create(kind: str, child: Mapping[str, Any]) -> None:
            name = child["metadata"]["name"]
            write = self.kube.create_pod if kind == "pod" else self.kube.create_service
            try:
                created = await write(namespace, child)
            except ApiError as error:
                if error.namespace_terminating:
                    # As Kubernetes' own controllers do: not a failure, and no retry. The
                    # namespace's deletion removes the job, which ends its worker.
                    logger.debug("not creating %s %s/%s: %s", kind, namespace, name, error)
                    return
                kopf.event(
                    body, type=WARNING, reason=f"FailedCreate{kind.title()}", message=str(error)
                )
                raise
            (expected.created_pods if kind == "pod" else expected.created_services)[name] = (
                time.monotonic()
            )
            if created:
                counter = (
                    self.metrics.pods_created if kind == "pod" else self.metrics.services_created
                )
                counter.inc()
                done[(f"SuccessfulCreate{kind.title()}", f"Created {kind}s {{}}")].append(name)

        calls: list[Awaitable[None]] = [
            *(delete_pod(d.name, d.uid, d.why) for d in plan.delete_pods),
            *(delete_service(d.name, d.uid, d.why) for d in plan.delete_services),
            *(create("service", s) for s in plan.create_services),
            *(create("pod", p) for p in plan.create_pods),
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        for (reason, template), names in done.items():
            message = template.format(", ".join(sorted(names)))
            kopf.event(body, type=NORMAL, reason=reason, message=message)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]


def _skip_expected(
    plan: Plan,
    expected: _Expectations,
    pods: Iterable[Any],
    services: Iterable[Any],
) -> None:
    """Forgets expectations the cache now shows and drops the writes still in flight."""
    lapsed = time.monotonic() - EXPECTATION_TTL_SECONDS
    for created, seen in (
        (expected.created_pods, {p.name for p in pods}),
        (expected.created_services, {s.name for s in services}),
    ):
        for name in [n for n, at in created.items() if n in seen or at < lapsed]:
            del created[name]
    expected.deleted_pods &= {p.uid for p in pods if not p.terminating}
    expected.deleted_services &= {s.uid for s in services}
    plan.create_pods = [
        p for p in plan.create_pods if p["metadata"]["name"] not in expected.created_pods
    ]
    plan.delete_pods = [d for d in plan.delete_pods if d.uid not in expected.deleted_pods]
    plan.delete_services = [
        d for d in plan.delete_services if d.uid not in expected.deleted_services
    ]
    plan.create_services = [
        s for s in plan.create_services if s["metadata"]["name"] not in expected.created_services
    ]


class _JobWorker:
    """Reconciles one job whenever woken, or when its next deadline comes."""

    def __init__(self, key: JobKey, controller: Controller) -> None:
        self.key = key
        self.controller = controller
        self._wakeup = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"tfjob {key[0]}/{key[1]}")

    def wake(self) -> None:
        self._wakeup.set()

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
                outcome = await self.controller.reconcile(self.key)
            except Exception:
                errors += 1
                delay = min(2.0**errors, MAX_ERROR_BACKOFF_SECONDS)
                self.controller.metrics.reconcile_errors.inc()
                logger.exception(
                    "reconcile of tfjob %s/%s failed; retrying in %.0fs", *self.key, delay
                )
                continue
            errors = 0
            if isinstance(outcome, _Gone):
                return
            delay = outcome


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Registers the indexes and the watch handlers that wake the job workers."""

    # Handlers are nested here, so kopf's default ids (qualified names) would not be valid
    # keyword names: the indexes reach handlers as kwargs named by these ids.
    @kopf.index(GROUP, VERSION, PLURAL, id="tfjob_index", registry=registry)
    def tfjob_index(
        body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> dict[JobKey, Any]:
        # managedFields and annotations such as last-applied-configuration are dropped:
        # the cache keeps only what decisions and events read.
        metadata = {k: v for k, v in body.metadata.items() if k not in _UNREAD_METADATA}
        snapshot = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "metadata": metadata,
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
        return {(namespace or "", name): kopf.Body(cast(kopf.RawBody, snapshot))}

    @kopf.index(
        "v1", "pods", labels={LABEL_JOB_NAME: kopf.PRESENT}, id="tfjob_pod_index", registry=registry
    )
    def tfjob_pod_index(
        body: kopf.Body, namespace: str | None, labels: Mapping[str, str], **_: Any
    ) -> dict[JobKey, Any]:
        return {(namespace or "", labels[LABEL_JOB_NAME]): observe_pod(body)}

    @kopf.index(
        "v1",
        "services",
        labels={LABEL_JOB_NAME: kopf.PRESENT},
        id="tfjob_service_index",
        registry=registry,
    )
    def tfjob_service_index(
        body: kopf.Body, namespace: str | None, labels: Mapping[str, str], **_: Any
    ) -> dict[JobKey, Any]:
        return {(namespace or "", labels[LABEL_JOB_NAME]): observe_service(body)}

    def wake(key_of: Callable[..., JobKey]) -> Callable[..., Awaitable[None]]:
        async def handler(
            tfjob_index: kopf.Index[JobKey, Any],
            tfjob_pod_index: kopf.Index[JobKey, Any],
            tfjob_service_index: kopf.Index[JobKey, Any],
            **kwargs: Any,
        ) -> None:
            indexes = Indexes(tfjob_index, tfjob_pod_index, tfjob_service_index)
            controller.notify(key_of(**kwargs), indexes)

        return handler

    kopf.on.event(GROUP, VERSION, PLURAL, id="wake_job", registry=registry)(
        wake(lambda namespace, name, **_: (namespace, name))
    )
    for resource in ("pods", "services"):
        kopf.on.event(
            "v1",
            resource,
            labels={LABEL_JOB_NAME: kopf.PRESENT},
            id=f"wake_job_of_{resource}",
            registry=registry,
        )(wake(lambda namespace, labels, **_: (namespace, labels[LABEL_JOB_NAME])))

    @kopf.on.cleanup(id="stop_workers", registry=registry)
    async def stop_workers(**_: Any) -> None:
        await controller.stop()
