"""The floor: what the operator phase's work costs the API server with no operator at all.

1. Creation: the driver creates the N TFJobs, as in the operator phase. Then a client with
   `floor_concurrency` requests in flight creates the Services and Pods the operator would
   (rendered by the operator's own functions), on a fresh cluster of the same kind. They
   have no owner reference, so that the garbage collector leaves them be. Their creation
   time is what those objects cost the API server on this machine; the operator's
   creation time is compared to it.
2. Completion: once kwok has every pod Running, the floor's responder (bench.responder)
   starts in a process of its own, as the operator runs, and the driver ends the leaders
   exactly as in the operator phase (bench.leaders) once the audit log shows the
   responder's watch of the pods. The responder marks each job Succeeded the moment it
   sees the exit. Its exit→Succeeded is the operator's compared to it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import ROOT, measure
from bench.cluster import DRIVER_USER, FLOOR_USER, NAMESPACE, BenchCluster
from bench.exitwindow import ExitWindow
from bench.leaders import end_leaders
from bench.procstats import Meter
from bench.progress import Progress
from bench.settings import Settings
from bench.shape import floor_objects, job_names, tfjob
from bench.stats import summarize
from bench.watching import watching
from harness import audit, promtext
from harness.apiclient import ApiClient, bounded, reply_message
from tfjob_localcluster.host.procs import ManagedProcess

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


#: How long the responder has to exit on SIGTERM before it is killed.
RESPONDER_GRACE_SECONDS = 5.0


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
    span = floor_span(requests, len(objects))
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
        ApiClient(
            cluster.user_kubeconfig(DRIVER_USER), connections=settings.driver_connections
        ) as driver,
        ApiClient(
            cluster.user_kubeconfig(FLOOR_USER), connections=settings.floor_concurrency
        ) as floor,
        watching(driver, watches) as check,
    ):
        # The TFJobs first, as the operator phase has them before any child: the
        # creation span starts at the floor client's first request.
        jobs = [
            creation(driver, jobs_path, tfjob(settings.api_version, name, shape), failures)
            for name in names
        ]
        await bounded(settings.driver_concurrency, jobs)
        meter = Meter(cluster.component_pids())
        await bounded(
            settings.floor_concurrency,
            [creation(floor, path, body, failures) for path, body in objects],
        )
        if failures:
            return Outcome(failures, {}, meter.reading(), None)
        timeout = settings.timeout
        await progress.wait_until(progress.all_created, "every floor object seen", timeout, check)
        creation_usage = meter.reading()
        await progress.wait_until(progress.all_running, "every pod Running", timeout, check)
        responder = ManagedProcess(
            "responder",
            responder_argv(cluster, leaders, jobs_path, pods_path, settings.floor_concurrency),
            cluster.state_dir / "responder.log",
            cwd=ROOT,
        )
        identity = responder.start()
        try:

            def checks() -> None:
                check()
                if not responder.running():
                    raise FloorError(
                        f"the responder exited; last lines of its log:\n{responder.tail()}"
                    )

            await wait_watching_pods(cluster.audit_log, timeout, checks)
            window = await ExitWindow.open(
                driver, {**cluster.component_pids(), "responder": identity.pid}
            )
            await end_leaders(driver, progress, leaders, settings.driver_concurrency)
            await progress.wait_until(
                progress.all_succeeded, "every TFJob marked Succeeded", timeout, checks
            )
            exit_window = await window.close(driver, {"tfjobs": len(progress.succeeded)})
        finally:
            await asyncio.to_thread(responder.stop, RESPONDER_GRACE_SECONDS)
    return Outcome(failures, dict(progress.succeeded), creation_usage, exit_window)


def floor_span(requests: list[audit.Request], expected: int) -> measure.Span:
    """From the floor client's first request to its last create answered, once the audit
    log shows every one of the `expected` objects created."""
    mine = audit.completed(requests, FLOOR_USER)
    creates = audit.created(mine, "pods") + audit.created(mine, "services")
    if measure.distinct_names(creates) != expected:
        raise FloorError(
            f"the audit log shows {measure.distinct_names(creates)} objects created "
            f"by {FLOOR_USER}, expected {expected}"
        )
    return measure.creation_span(mine, creates)


def creation(
    client: ApiClient, path: str, body: Obj, failures: list[str]
) -> Callable[[], Awaitable[None]]:
    """A create for `bounded`; a refusal goes into `failures` (the run is void with any)."""

    async def call() -> None:
        status, reply = await client.send("POST", path, body)
        if status != 201:
            message = reply_message(reply)
            failures.append(f"POST {path} {body['metadata']['name']}: {status} {message}")

    return call


def responder_argv(
    cluster: BenchCluster,
    leaders: Mapping[str, str],
    jobs_path: str,
    pods_path: str,
    writes: int,
) -> list[str]:
    """`python -m bench.responder` with the floor user's credentials; it reads the leaders
    from a file in the cluster's state dir."""
    leaders_file = cluster.state_dir / "leaders.json"
    leaders_file.write_text(json.dumps(dict(leaders)))
    return [
        sys.executable,
        "-m",
        "bench.responder",
        f"--kubeconfig={cluster.user_kubeconfig(FLOOR_USER)}",
        f"--jobs-path={jobs_path}",
        f"--pods-path={pods_path}",
        f"--leaders={leaders_file}",
        f"--writes={writes}",
    ]


async def wait_watching_pods(audit_log: Path, within: float, check: Callable[[], None]) -> None:
    """Until the audit log shows the floor user's watch of the pods: the responder's, the
    floor user's first (the harness watches as the driver)."""
    tail = audit.Tail(audit_log)
    try:
        async with asyncio.timeout(within):
            while "pods" not in audit.watched(await asyncio.to_thread(tail.new), FLOOR_USER):
                check()
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise FloorError(f"the responder did not watch the pods within {within:.0f}s") from None
