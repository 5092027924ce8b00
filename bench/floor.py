"""The floor: the children of N TFJobs created directly, as fast as the API server takes them.

No operator and no TFJob: a client with `floor_concurrency` requests in flight creates the
same Services and Pods the operator would (rendered by the operator's own functions, without
the owner reference), on a fresh cluster of the same kind. Its time is what creating those
objects costs the API server on this machine; the operator's time is compared to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from bench import audit, measure, promtext
from bench.apiclient import ApiClient, bounded
from bench.cluster import DRIVER_USER, FLOOR_USER, NAMESPACE, BenchCluster
from bench.procstats import Meter
from bench.progress import Progress
from bench.settings import Settings
from bench.shape import floor_objects, job_names
from bench.stats import summarize
from bench.watching import watching

Obj = dict[str, Any]


class FloorError(RuntimeError):
    pass


def run_floor(
    settings: Settings, size: int, round_: int, say: Callable[[str], None]
) -> dict[str, Any]:
    names = job_names(size)
    objects = list(floor_objects(NAMESPACE, names, settings.shape))
    with BenchCluster(
        settings.state_dir("floor", size, round_),
        crds=list(settings.crds),
        nodes=settings.nodes,
        say=say,
    ) as cluster:
        meter = Meter(cluster.component_pids())
        say(f"floor: creating {len(objects)} objects, {settings.floor_concurrency} in flight")
        failures = asyncio.run(_create_all(cluster, settings, names, objects))
        usage = meter.reading()
        server_metrics = cluster.server_metrics()
        requests = audit.read(cluster.audit_log)
    if failures:
        raise FloorError(f"{len(failures)} creates failed; first: {failures[0]}")
    mine = audit.completed(requests, FLOOR_USER)
    creates = audit.created(mine, "pods") + audit.created(mine, "services")
    if measure.distinct_names(creates) != len(objects):
        raise FloorError(
            f"the audit log shows {measure.distinct_names(creates)} objects created "
            f"by {FLOOR_USER}, expected {len(objects)}"
        )
    span = measure.creation_span(mine, creates)
    say(f"floor: {len(objects)} objects in {span.seconds:.2f}s ({span.per_second:.0f}/s)")
    return {
        "objects": len(objects),
        "create_seconds": round(span.seconds, 4),
        "objects_per_second": round(span.per_second, 1),
        "server_create_latency_seconds": summarize([r.at - r.received for r in creates]),
        "concurrency": settings.floor_concurrency,
        "requests": audit.count(mine).as_dict(),
        "watches": {
            "started": audit.watch_starts(requests),
            "terminated_by_server": promtext.terminated_watchers(server_metrics),
        },
        "cluster_startup_seconds": round(cluster.startup_seconds, 2),
        "usage": usage,
    }


async def _create_all(
    cluster: BenchCluster, settings: Settings, names: list[str], objects: list[tuple[str, Obj]]
) -> list[str]:
    """Creates every object; returns the failures (method, path, status, message)."""
    shape = settings.shape
    children = [child for name in names for child in shape.child_names(name)]
    progress = Progress.expecting(children, [shape.leader_name(name) for name in names])
    failures: list[str] = []
    watches = {
        f"/api/v1/namespaces/{NAMESPACE}/pods": progress.on_pod,
        f"/api/v1/namespaces/{NAMESPACE}/services": progress.on_service,
    }
    async with (
        ApiClient(cluster.kubeconfig(DRIVER_USER), connections=8) as driver,
        ApiClient(cluster.kubeconfig(FLOOR_USER), connections=settings.floor_concurrency) as floor,
        watching(driver, watches) as check,
    ):

        def create(path: str, body: Obj) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                status, reply = await floor.send("POST", path, body)
                if status != 201:
                    message = reply.get("message") if isinstance(reply, dict) else reply
                    failures.append(f"POST {path} {body['metadata']['name']}: {status} {message}")

            return call

        await bounded(settings.floor_concurrency, [create(path, body) for path, body in objects])
        if not failures:
            await progress.wait_until(
                progress.all_created, "every floor object seen", settings.timeout, check
            )
    return failures
