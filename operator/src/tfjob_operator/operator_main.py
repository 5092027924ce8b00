"""Wires the watch caches, the writes, the controller and the HTTP endpoints, and runs them.

Start-up order matters: every cache is filled from a full listing before the first
reconcile, so no job decides from a partial view of its children. Until then changes are
only collected; then every job seen is woken once. With leader election (leader.py) the
caches are filled all the same, and the operator is ready (`/readyz`) as a standby, but
the jobs are woken only once it leads; one that stops leading exits (status 1), to come
back as a candidate.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .api import LABEL_JOB_NAME, MULTIKUEUE, PLURAL, TFJobApi, manager_of
from .apiserver.aio import ApiServerClient
from .apiserver.connection import load_connection
from .controller import Caches, Controller
from .endpoints import Endpoints
from .integrations import Settings, integrations
from .integrations.gang import GangSchedulers
from .job_view import JobView
from .kube import Kube
from .leader import LEASES_PATH, Election, Elector, LeaseRecord
from .limits import INVALID_POD_GRACE_SECONDS
from .metrics import Metrics
from .metrics_access import MetricsGuard
from .observe import (
    observe_pod,
    observe_service,
)
from .resources import JobKey, Resource, child_reader
from .watchcache import Store, Watch

logger = logging.getLogger(__name__)


def job_reader(
    api: TFJobApi,
) -> Callable[[Mapping[str, Any]], tuple[str, JobKey, JobView] | None]:
    """Reads a TFJob of `api` into its record; one another controller manages is skipped
    (managedBy is immutable, so a job never moves in or out), but for MultiKueue's: on a
    manager cluster the operator makes the Workload MultiKueue dispatches (decide/)."""

    def read(body: Mapping[str, Any]) -> tuple[str, JobKey, JobView] | None:
        if manager_of(body) not in (None, MULTIKUEUE):
            return None
        job = JobView.from_body(body, api)
        return job.ref.uid, (job.ref.namespace, job.ref.name), job

    return read


def lease_watch(api: ApiServerClient, election: Election, elector: Elector) -> Watch[LeaseRecord]:
    """A watch of the one Lease, whose every change the elector observes."""
    store: Store[LeaseRecord] = Store()

    def read(body: Mapping[str, Any]) -> tuple[str, JobKey, LeaseRecord]:
        metadata = body["metadata"]
        return (
            metadata["uid"],
            (metadata["namespace"], metadata["name"]),
            LeaseRecord.from_body(body),
        )

    def changed(key: JobKey) -> None:
        elector.observe(next(iter(store.get(key)), None))

    resource = Resource("leases", LEASES_PATH, field_selector=f"metadata.name={election.lease}")
    return Watch(api, resource, election.namespace, store, read, changed)


class _StartGate:
    """Collects the jobs that changed until every cache is synced, then passes them on."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.pending: set[JobKey] | None = set()

    def changed(self, key: JobKey) -> None:
        if self.pending is None:
            self.controller.notify(key)
        else:
            self.pending.add(key)

    def open(self) -> None:
        pending, self.pending = self.pending or set(), None
        for key in sorted(pending):
            self.controller.notify(key)


async def run_operator(
    *,
    kubeconfig: str | None,
    apis: Sequence[TFJobApi],
    namespaces: Sequence[str],
    cluster_domain: str | None,
    health_port: int,
    metrics_port: int,
    max_in_flight: int,
    concurrent_reconciles: int,
    gangs: GangSchedulers,
    invalid_grace_seconds: float = INVALID_POD_GRACE_SECONDS,
    tensorboard_image: str | None = None,
    election: Election | None = None,
    metrics_tls: ssl.SSLContext | None = None,
) -> int:
    """With `metrics_tls`, /metrics is served over it to callers the API server
    authenticates and authorizes (metrics_access.py)."""
    connection = load_connection(kubeconfig)
    metrics = Metrics()
    api = ApiServerClient(connection, max_in_flight, metrics)
    elector = None
    if election is not None:
        elector = Elector(
            api, election.namespace, election.lease, election.identity, election.timings, metrics
        )
        api.fence = elector.write_deadline
    enabled = integrations(Settings(gangs, tensorboard_image, cluster_domain))
    caches = Caches(
        jobs=Store(),
        pods=Store(),
        services=Store(),
        integrations={integration.name: Store() for integration in enabled},
    )
    watches: list[Watch[Any]] = []

    def served(api_version: str) -> None:
        for watch in watches:
            if watch.resource.group_path == f"/apis/{api_version}":
                watch.recheck()

    controller = Controller(
        Kube(api),
        caches,
        metrics,
        cluster_domain,
        instance=f"tfjob-operator@{socket.gethostname()}",
        concurrent_reconciles=concurrent_reconciles,
        integrations=enabled,
        invalid_grace_seconds=invalid_grace_seconds,
        served=served,
    )
    gate = _StartGate(controller)
    scopes: list[str | None] = list(namespaces) or [None]
    for scope in scopes:
        watches += [
            Watch(
                api,
                Resource(PLURAL, served.path),
                scope,
                caches.jobs,
                job_reader(served),
                gate.changed,
            )
            for served in apis
        ]
        watches += [
            Watch(
                api,
                Resource("pods", label_selector=LABEL_JOB_NAME),
                scope,
                caches.pods,
                child_reader(observe_pod),
                gate.changed,
                deleted=caches.pod_deleted,
            ),
            Watch(
                api,
                Resource("services", label_selector=LABEL_JOB_NAME),
                scope,
                caches.services,
                child_reader(observe_service),
                gate.changed,
            ),
        ]
        # What each integration watches (integrations/): another project's resources may
        # not be served (their watches are optional).
        watches += [
            Watch(
                api,
                watched.resource,
                scope,
                caches.integrations[integration.name],
                watched.read,
                gate.changed,
            )
            for integration in enabled
            for watched in integration.watches()
        ]
    if election is not None and elector is not None:
        watches.append(lease_watch(api, election, elector))
    for watch in watches:
        watch.restarted = metrics.watch_restarted(watch.resource.name)
    synced_flag: list[bool] = []
    guard = None
    if metrics_tls is not None:
        guard = MetricsGuard(
            lambda path, body: api.request("POST", path, data=body, limit_seconds=10)
        )
    endpoints = Endpoints(metrics, ready=lambda: bool(synced_flag), guard=guard)
    await endpoints.start(health_port, metrics_port, metrics_tls)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    scope_text = f"namespaces {', '.join(namespaces)}" if namespaces else "all namespaces"
    logger.info(
        "tfjob-operator watching %s of %s on %s; /healthz and /readyz on :%d, /metrics on :%d (%s)",
        " and ".join(a.crd_name for a in apis),
        scope_text,
        connection.server,
        health_port,
        metrics_port,
        "HTTPS, to callers allowed to get /metrics" if guard else "HTTP",
    )
    watching: set[asyncio.Task[Any]] = {
        asyncio.create_task(w.run(), name=f"watch {w.describe}") for w in watches
    }
    stop = asyncio.create_task(stopping.wait())
    synced = asyncio.create_task(_all_synced(watches))
    campaign = asyncio.create_task(elector.run() if elector else asyncio.Event().wait())
    leading = asyncio.create_task(elector.leading.wait() if elector else asyncio.sleep(0))
    ending = {stop, campaign, *watching}
    code = 0
    try:
        done, _ = await asyncio.wait({synced, *ending}, return_when="FIRST_COMPLETED")
        if synced in done:
            synced_flag.append(True)
            logger.info("caches synced: %d TFJobs", len(caches.jobs.keys()))
            if elector is not None and not elector.leading.is_set():
                logger.info("%s is a standby: waiting for the Lease", elector.identity)
            done, _ = await asyncio.wait({leading, *ending}, return_when="FIRST_COMPLETED")
            if leading in done:
                gate.open()
                done, _ = await asyncio.wait(ending, return_when="FIRST_COMPLETED")
        for task in done & watching:
            task.result()  # a watch ended: re-raise what ended it
        if campaign in done:
            campaign.result()
            code = 1  # it stopped leading: its writes are fenced, and it exits
        logger.info("stopping")
    finally:
        for task in (synced, stop, leading, campaign, *watching):
            task.cancel()
        await asyncio.gather(synced, stop, leading, campaign, *watching, return_exceptions=True)
        await controller.stop()
        if elector is not None and code == 0:
            await elector.release()
        await endpoints.stop()
        await api.close()
    return code


async def _all_synced(watches: Sequence[Watch[Any]]) -> None:
    for watch in watches:
        await watch.synced.wait()
