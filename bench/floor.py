"""The floor: what the operator phase's work costs the API server with no operator at all.

1. Creation: the driver creates the N TFJobs, as in the operator phase. Then a client with
   `floor_concurrency` requests in flight creates the Services and Pods the operator would
   (rendered by the operator's own functions), on a fresh cluster of the same kind. They
   have no owner reference, so that the garbage collector leaves them be. Their creation
   time is what those objects cost the API server on this machine; the operator's
   creation time is compared to it.
2. Completion: once kwok has every pod Running, the driver ends the leaders exactly as in
   the operator phase (bench.leaders), and the floor's responder (bench.responder) marks
   each job Succeeded the moment it sees the exit. Its exit→Succeeded is the operator's
   compared to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench import audit, measure, promtext
from bench.apiclient import ApiClient, bounded, reply_message
from bench.cluster import DRIVER_USER, FLOOR_USER, NAMESPACE, BenchCluster
from bench.exitwindow import ExitWindow
from bench.leaders import end_leaders
from bench.procstats import Meter
from bench.progress import Progress
from bench.responder import Responder
from bench.settings import Settings
from bench.shape import floor_objects, job_names, tfjob
from bench.stats import summarize
from bench.watching import watching

Obj = dict[str, Any]


class FloorError(RuntimeError):
    pass


@dataclass(frozen=True)
class Outcome:
    #: Requests that failed (method, path, status, message); the run is void with any.
    failures: list[str]
    #: Job name -> when the harness saw it Succeeded (epoch seconds).
    succeeded_at: dict[str, float]
    #: CPU used until every object was seen created (procstats.Meter.reading).
    creation_usage: dict[str, object]
    #: What the exits cost the machine (bench.exitwindow); None if the run ended before.
    exit_window: dict[str, Any] | None


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
        say(f"floor: creating {len(objects)} objects, {settings.floor_concurrency} in flight")
        outcome = asyncio.run(_drive(cluster, settings, names, objects))
        server_metrics = cluster.server_metrics()
        requests = audit.read(cluster.audit_log)
    if outcome.failures:
        raise FloorError(f"{len(outcome.failures)} requests failed; first: {outcome.failures[0]}")
    mine = audit.completed(requests, FLOOR_USER)
    creates = audit.created(mine, "pods") + audit.created(mine, "services")
    if measure.distinct_names(creates) != len(objects):
        raise FloorError(
            f"the audit log shows {measure.distinct_names(creates)} objects created "
            f"by {FLOOR_USER}, expected {len(objects)}"
        )
    span = measure.creation_span(mine, creates)
    done = measure.completion(
        audit.completed(requests, DRIVER_USER) + mine,
        DRIVER_USER,
        settings.shape.leaders(names),
        FLOOR_USER,
        outcome.succeeded_at,
    )
    say(
        f"floor: {len(objects)} objects in {span.seconds:.2f}s ({span.per_second:.0f}/s), "
        f"exit->Succeeded p50 {done['exit_to_succeeded_seconds']['p50']:.3f}s"
    )
    return {
        "objects": len(objects),
        "create_seconds": round(span.seconds, 4),
        "objects_per_second": round(span.per_second, 1),
        "server_create_latency_seconds": summarize([r.at - r.received for r in creates]),
        **done,
        "concurrency": settings.floor_concurrency,
        "requests": audit.count(mine).as_dict(),
        "watches": {
            "started": audit.watch_starts(requests),
            "terminated_by_server": promtext.terminated_watchers(server_metrics),
        },
        "cluster_startup_seconds": round(cluster.startup_seconds, 2),
        "usage": outcome.creation_usage,
        "exit_window": outcome.exit_window,
    }


async def _drive(
    cluster: BenchCluster, settings: Settings, names: list[str], objects: list[tuple[str, Obj]]
) -> Outcome:
    """Creates the TFJobs, then their children, then ends the leaders (module docstring)."""
    shape = settings.shape
    children = [child for name in names for child in shape.child_names(name)]
    leaders = shape.leaders(names)
    progress = Progress.expecting(children, leaders)
    failures: list[str] = []
    jobs_path = settings.jobs_path(NAMESPACE)
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    watches = {
        pods_path: progress.on_pod,
        f"/api/v1/namespaces/{NAMESPACE}/services": progress.on_service,
        jobs_path: progress.on_job,
    }
    async with (
        ApiClient(cluster.kubeconfig(DRIVER_USER), connections=8) as driver,
        ApiClient(cluster.kubeconfig(FLOOR_USER), connections=settings.floor_concurrency) as floor,
        watching(driver, watches) as check,
    ):

        def create(client: ApiClient, path: str, body: Obj) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                status, reply = await client.send("POST", path, body)
                if status != 201:
                    message = reply_message(reply)
                    failures.append(f"POST {path} {body['metadata']['name']}: {status} {message}")

            return call

        # The TFJobs first, as the operator phase has them before any child: the
        # creation span starts at the floor client's first request.
        jobs = [
            create(driver, jobs_path, tfjob(settings.api_version, name, shape)) for name in names
        ]
        await bounded(settings.driver_concurrency, jobs)
        meter = Meter(cluster.component_pids())
        await bounded(
            settings.floor_concurrency, [create(floor, path, body) for path, body in objects]
        )
        if failures:
            return Outcome(failures, {}, meter.reading(), None)
        timeout = settings.timeout
        await progress.wait_until(progress.all_created, "every floor object seen", timeout, check)
        creation_usage = meter.reading()
        await progress.wait_until(progress.all_running, "every pod Running", timeout, check)
        responder = Responder(floor, jobs_path, leaders)
        async with watching(floor, {pods_path: responder.on_pod}) as responder_check:

            def checks() -> None:
                check()
                responder_check()
                if responder.failures:
                    raise FloorError(f"the responder's write failed: {responder.failures[0]}")

            window = await ExitWindow.open(driver, cluster.component_pids())
            await end_leaders(driver, progress, leaders, settings.driver_concurrency)
            await progress.wait_until(
                progress.all_succeeded, "every TFJob marked Succeeded", timeout, checks
            )
            exit_window = await window.close(driver)
    return Outcome(failures, dict(progress.succeeded), creation_usage, exit_window)
