"""The operator phase: N TFJobs through the operator under test, on a fresh cluster.

1. Start the operator (its own user) and wait until it watches TFJobs, pods and services;
   with a standby (this repository's operator, as the chart runs it), the operator elects
   itself leader on a Lease, then the standby (a user of its own) starts and fills its
   caches, and its cost is read like the leader's.
2. Submit N TFJobs (`driver_concurrency` creates in flight) and wait until every pod and
   service exists, then until kwok has every pod Running.
3. End every job's leader (chief, else worker 0): the driver writes its pod's status as a
   kubelet would (exit code 0, phase Succeeded), all jobs at once, and waits until every
   TFJob's Succeeded condition is seen, then until the operator has deleted the pods still
   running (cleanPodPolicy Running).
4. Wait until the operator goes quiet, read its usage from /proc, stop it, and read the
   API server's audit log and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import measure
from bench.cluster import (
    DRIVER_USER,
    NAMESPACE,
    OPERATOR_USER,
    STANDBY_USER,
    BenchCluster,
    flow_schema_name,
)
from bench.exitwindow import ExitWindow
from bench.leaders import end_leaders
from bench.procstats import MIB, Meter, Sampler, group_usage
from bench.progress import Progress, WaitTimeout
from bench.settings import Settings
from bench.shape import Shape, job_names, tfjob
from bench.stats import summarize
from bench.watching import watching
from harness import audit, promtext
from harness.apiclient import ApiClient, EventHandler, bounded
from harness.operator_process import ERROR_LINE, OperatorCommand, OperatorProcess
from tfjob_localcluster.host.procs import ProcessIdentity

#: After the operator reports ready, before the first TFJob: its startup's tail settles.
SETTLE_SECONDS = 1.0
#: The operator counts as quiet when the audit log has not grown for this long.
QUIET_SECONDS = 2.0


class OperatorRunError(RuntimeError):
    pass


@dataclass(frozen=True)
class Moments:
    """What one drive saw: harness-clock moments (epoch seconds), and what the exits cost."""

    submitted: float
    created: float
    running: float
    exits_sent: float
    succeeded: float
    cleaned: float | None
    left_running: int
    succeeded_at: dict[str, float]
    #: What the exits cost the machine (bench.exitwindow).
    exit_window: dict[str, Any]


def run_operator(
    settings: Settings, size: int, round_: int, say: Callable[[str], None]
) -> dict[str, Any]:
    state_dir = settings.state_dir("operator", size, round_)
    with BenchCluster(
        state_dir, crds=list(settings.crds), nodes=settings.nodes, say=say
    ) as cluster:
        operator = OperatorProcess(
            _candidate(settings, "leader"),
            cluster.user_kubeconfig(OPERATOR_USER),
            state_dir / "operator.log",
            OPERATOR_USER,
        )
        standby = None
        identity = operator.start()
        sampler = Sampler(identity)
        sampler.start()
        try:
            ready_seconds = operator.wait_ready(cluster.audit_log, settings.timeout, cluster.check)
            if settings.standby:
                standby = _start_standby(settings, cluster, operator, state_dir, say)
            time.sleep(SETTLE_SECONDS)
            at_ready = group_usage(identity)
            say(
                f"operator ready in {ready_seconds:.1f}s "
                f"({at_ready.rss_bytes / MIB:.0f} MiB); submitting {size} TFJobs"
            )
            meter = Meter(cluster.component_pids())
            moments = asyncio.run(_drive(cluster, operator, identity.pid, settings, size))
            wait_quiet(cluster.audit_log, settings.timeout)
            operator.check()
            final = sampler.stop()
            usage = meter.reading(final.cpu_seconds - at_ready.cpu_seconds)
            own_metrics = operator.metrics()
            log_lines = operator.log_lines()
            error_lines = [line for line in log_lines if ERROR_LINE.search(line)]
            standing_by = standby.reading() if standby else None
        finally:
            sampler.stop()
            if standby is not None:
                standby.stop()
            operator.stop()
        _wait_watches_closed(cluster.audit_log, settings.timeout)
        server_metrics = cluster.server_metrics()
        requests = audit.read(cluster.audit_log)
        startup = cluster.startup_seconds
    result = _figures(settings, size, requests, moments)
    operator_requests = audit.completed(requests, OPERATOR_USER)
    counts = audit.count(operator_requests)
    result.update(
        {
            "requests": {
                **counts.as_dict(),
                "per_job": round(counts.total / size, 2),
                "writes_per_job": round(counts.writes / size, 2),
                "conflicts": counts.by_code.get("409", 0),
                "apf_dispatched": promtext.dispatched_requests(
                    server_metrics, flow_schema_name(OPERATOR_USER)
                ),
            },
            "process": {
                "peak_rss_mib": round(max(final.peak_rss_bytes, sampler.peak_rss_bytes()) / MIB, 1),
                "rss_at_ready_mib": round(at_ready.rss_bytes / MIB, 1),
                "rss_at_end_mib": round(final.rss_bytes / MIB, 1),
                "cpu_seconds": round(final.cpu_seconds, 2),
                "cpu_seconds_after_ready": round(final.cpu_seconds - at_ready.cpu_seconds, 2),
                "ready_seconds": round(ready_seconds, 2),
                "log_lines": len(log_lines),
                "log_error_lines": len(error_lines),
                "log_error_examples": error_lines[:5],
                "rss_timeline": sampler.timeline(since=moments.submitted),
            },
            "own_metrics": promtext.counters(own_metrics, "tfjob_operator_"),
            "watches": {
                "started": audit.watch_starts(requests),
                "terminated_by_server": promtext.terminated_watchers(server_metrics),
            },
            "cluster_startup_seconds": round(startup, 2),
            "usage": usage,
        }
    )
    if standing_by is not None:
        counted = audit.count(audit.completed(requests, STANDBY_USER))
        result["standby"] = {**standing_by, "requests": counted.total, "writes": counted.writes}
        say(
            f"standby: {standing_by['cpu_seconds_after_ready']} CPU s after ready, peak RSS "
            f"{standing_by['peak_rss_mib']} MiB, {counted.writes} writes"
        )
    say(
        f"operator: all created in {result['create_seconds']:.2f}s, "
        f"exit->Succeeded p50 {result['exit_to_succeeded_seconds'].get('p50', 0):.3f}s, "
        f"{result['requests']['per_job']} requests/job, "
        f"peak RSS {result['process']['peak_rss_mib']} MiB"
    )
    return result


def _candidate(settings: Settings, identity: str) -> OperatorCommand:
    """The operator's command; with a standby, one candidate of a leader election."""
    if not settings.standby:
        return settings.operator
    election = (
        f" --leader-elect --leader-election-namespace={NAMESPACE}"
        f" --leader-election-identity={identity}"
    )
    return replace(settings.operator, template=settings.operator.template + election)


class Standby:
    """The second candidate: started once the leader leads, measured like it."""

    def __init__(self, process: OperatorProcess, identity: ProcessIdentity) -> None:
        self.process = process
        self.sampler = Sampler(identity)
        self.sampler.start()
        self.identity = identity
        self.at_ready = group_usage(identity)

    def reading(self) -> dict[str, float]:
        final = self.sampler.stop()
        return {
            "cpu_seconds_after_ready": round(final.cpu_seconds - self.at_ready.cpu_seconds, 2),
            "rss_at_ready_mib": round(self.at_ready.rss_bytes / MIB, 1),
            "peak_rss_mib": round(
                max(final.peak_rss_bytes, self.sampler.peak_rss_bytes()) / MIB, 1
            ),
            "leader": promtext.counters(self.process.metrics(), "tfjob_operator_leader").get(
                "tfjob_operator_leader", -1.0
            ),
        }

    def stop(self) -> None:
        self.sampler.stop()
        self.process.stop()


def _start_standby(
    settings: Settings,
    cluster: BenchCluster,
    leader: OperatorProcess,
    state_dir: Path,
    say: Callable[[str], None],
) -> Standby:
    leader.process.wait_ready(
        lambda: (
            promtext.counters(leader.metrics(), "tfjob_operator_leader").get(
                "tfjob_operator_leader"
            )
            == 1.0
        ),
        settings.timeout,
        OperatorRunError,
        what="the Lease taken",
    )
    process = OperatorProcess(
        _candidate(settings, "standby"),
        cluster.user_kubeconfig(STANDBY_USER),
        state_dir / "standby.log",
        STANDBY_USER,
    )
    identity = process.start()
    seconds = process.wait_ready(cluster.audit_log, settings.timeout, cluster.check)
    say(f"standby ready in {seconds:.1f}s")
    return Standby(process, identity)


async def _drive(
    cluster: BenchCluster, operator: OperatorProcess, pid: int, settings: Settings, size: int
) -> Moments:
    shape = settings.shape
    names = job_names(size)
    leaders = shape.leaders(names)
    children = [child for name in names for child in shape.child_names(name)]
    progress = Progress.expecting(children, leaders)
    jobs_path = settings.jobs_path(NAMESPACE)
    watches = {
        f"/api/v1/namespaces/{NAMESPACE}/pods": progress.on_pod,
        f"/api/v1/namespaces/{NAMESPACE}/services": progress.on_service,
        jobs_path: progress.on_job,
    }
    timeout = settings.timeout
    async with driving(cluster, operator, settings, watches) as (driver, check):
        submitted = time.time()
        submissions = [submission(driver, settings, name, shape) for name in names]
        await bounded(settings.driver_concurrency, submissions)
        created = await progress.wait_until(
            progress.all_created, "every pod and service created", timeout, check
        )
        running = await progress.wait_until(
            progress.all_running, "every pod Running", timeout, check
        )
        window = await ExitWindow.open(
            driver, {**cluster.component_pids(), "operator": pid}, operator.metrics
        )
        exits_sent = await end_leaders(driver, progress, leaders, settings.driver_concurrency)
        succeeded = await progress.wait_until(
            progress.all_succeeded, "every TFJob Succeeded", timeout, check
        )
        exit_window = await window.close(driver, {"tfjobs": len(progress.succeeded)})
        try:
            cleaned: float | None = await progress.wait_until(
                progress.only_leaders_left, "pods still running deleted", timeout, check
            )
        except WaitTimeout:
            cleaned = None
    return Moments(
        submitted=submitted,
        created=created,
        running=running,
        exits_sent=exits_sent,
        succeeded=succeeded,
        cleaned=cleaned,
        left_running=len(progress.pods_present - set(leaders)),
        succeeded_at=dict(progress.succeeded),
        exit_window=exit_window,
    )


@contextlib.asynccontextmanager
async def driving(
    cluster: BenchCluster,
    operator: OperatorProcess,
    settings: Settings,
    watches: Mapping[str, EventHandler],
) -> AsyncIterator[tuple[ApiClient, Callable[[], None]]]:
    """The driver's client with `watches` running, and a check that raises if a watch, the
    operator or the cluster has stopped."""
    async with (
        ApiClient(
            cluster.user_kubeconfig(DRIVER_USER), connections=settings.driver_connections
        ) as driver,
        watching(driver, watches) as watch_check,
    ):

        def check() -> None:
            watch_check()
            operator.check()
            cluster.check()

        yield driver, check


def submission(
    driver: ApiClient, settings: Settings, name: str, shape: Shape
) -> Callable[[], Awaitable[None]]:
    """The driver's create of a TFJob, for `bounded`."""

    async def call() -> None:
        body = tfjob(settings.api_version, name, shape)
        await driver.request("POST", settings.jobs_path(NAMESPACE), body)

    return call


def _figures(
    settings: Settings, size: int, requests: list[audit.Request], moments: Moments
) -> dict[str, Any]:
    """Creation span and per-job latencies from the audit log and the watch moments."""
    shape = settings.shape
    names = job_names(size)
    expected = size * shape.replicas_per_job
    operator_requests = audit.completed(requests, OPERATOR_USER)
    driver_requests = audit.completed(requests, DRIVER_USER)
    pods = [r for r in audit.created(operator_requests, "pods") if r.namespace == NAMESPACE]
    services = [r for r in audit.created(operator_requests, "services") if r.namespace == NAMESPACE]
    if measure.distinct_names(pods) != expected or measure.distinct_names(services) != expected:
        raise OperatorRunError(
            f"the audit log shows {measure.distinct_names(pods)} pods and "
            f"{measure.distinct_names(services)} services created by {OPERATOR_USER}; "
            f"expected {expected} of each"
        )
    submissions = [r for r in driver_requests if r.verb == "create" and r.resource == "tfjobs"]
    span = measure.creation_span(submissions, pods + services)
    jobs_created = measure.jobs_created(driver_requests, DRIVER_USER)
    create_to_pods = measure.per_job(jobs_created, measure.children_done(pods))
    since = moments.submitted
    return {
        "jobs": size,
        "jobs_succeeded": len(moments.succeeded_at),
        "pods_created": measure.distinct_names(pods),
        "services_created": measure.distinct_names(services),
        "create_seconds": round(span.seconds, 4),
        "objects_per_second": round(span.per_second, 1),
        "server_create_latency_seconds": summarize([r.at - r.received for r in pods + services]),
        "create_to_pods_seconds": summarize(list(create_to_pods.values())),
        **measure.completion(
            driver_requests + operator_requests,
            DRIVER_USER,
            shape.leaders(names),
            OPERATOR_USER,
            moments.succeeded_at,
        ),
        "timeline_seconds": {
            "all_created_seen": round(moments.created - since, 3),
            "all_running_seen": round(moments.running - since, 3),
            "exits_sent": round(moments.exits_sent - since, 3),
            "all_succeeded_seen": round(moments.succeeded - since, 3),
            "cleanup_done_seen": (
                round(moments.cleaned - since, 3) if moments.cleaned is not None else None
            ),
        },
        "cleanup_seconds": (
            round(moments.cleaned - moments.exits_sent, 3) if moments.cleaned is not None else None
        ),
        "pods_left_running": moments.left_running,
        "exit_window": moments.exit_window,
    }


def wait_quiet(audit_log: Path, timeout: float) -> None:
    """Until the audit log (the operator's and the driver's requests) shows nothing new for
    QUIET_SECONDS but what never stops while an operator runs (`periodic`)."""
    tail = audit.Tail(audit_log)
    deadline = time.monotonic() + timeout
    still_since = time.monotonic()
    while time.monotonic() - still_since < QUIET_SECONDS:
        if time.monotonic() > deadline:
            raise OperatorRunError(f"the operator kept sending requests for {timeout:.0f}s")
        time.sleep(0.2)
        if not all(periodic(request) for request in tail.new()):
            still_since = time.monotonic()


def periodic(request: audit.Request) -> bool:
    """A request an operator sends as long as it runs, whatever its jobs do: the leader's
    renewals of its Lease and the standby's reads of it (every 2 s), and the look every
    30 s at an optional resource the API server does not serve (a 404 list)."""
    return request.resource == "leases" or (request.verb == "list" and request.code == 404)


def _wait_watches_closed(audit_log: Path, timeout: float) -> None:
    """Until every watch the operator started has its final audit event (it has exited)."""
    tail = audit.Tail(audit_log)
    started = ended = 0
    deadline = time.monotonic() + min(timeout, 30)
    while time.monotonic() < deadline:
        for r in tail.new():
            if r.user == OPERATOR_USER and r.verb == "watch":
                started += r.stage == "ResponseStarted"
                ended += r.stage in audit.FINAL_STAGES
        if ended >= started:
            return
        time.sleep(0.2)
    raise OperatorRunError(
        f"{started - ended} watches of the stopped operator have no final audit event"
    )
