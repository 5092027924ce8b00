"""One TFJob at the replica bound beside small ones: what one large job costs the operator,
and whether the small jobs wait for it (docs/shared-clusters.md, "What one job may cost").

Every pod of the large job carries a TF_CONFIG naming all its replicas, so its pods are a
thousand times the size of a small job's, and there are a thousand of them. Four phases,
each on a fresh control plane with kwok nodes, as the rest of the benchmark:

1. **floor**: the driver creates the large TFJob; the floor client creates its pods and
   services directly (the operator's own render functions, `floor_concurrency` in
   flight). Its span, from the floor's first request to the last create answered, is what
   those objects cost the API server.
2. **large alone**: the operator under test and the large TFJob: its span, from its TFJob
   create received to its last child created, over the floor's, is the ratio.
3. **small alone**: the operator and `small` TFJobs of the benchmark's shape. For each,
   TFJob created → its last child created (the audit log).
4. **together**: the large TFJob is submitted, then at once the same small TFJobs: the
   small jobs' TFJob created → last child created beside it, against phase 3's, and the
   large job's span beside them.

In each operator phase its peak RSS (VmHWM) is read from /proc.

No exits: these are figures of creation, where a large job costs most.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import measure
from bench.cluster import DRIVER_USER, FLOOR_USER, NAMESPACE, OPERATOR_USER, BenchCluster
from bench.floor import creation, floor_span
from bench.operator_run import driving, submission, wait_quiet
from bench.procstats import MIB, Sampler, group_usage
from bench.progress import Progress
from bench.settings import Settings
from bench.shape import Shape, floor_objects, job_names, tfjob
from bench.stats import summarize
from harness import audit
from harness.apiclient import ApiClient, bounded
from harness.operator_process import OperatorProcess
from tfjob_operator.spec import MAX_REPLICAS

#: The large job: a chief and as many workers as the bound leaves (MultiWorkerMirroredStrategy).
BIG_SHAPE = Shape((("Chief", 1), ("Worker", MAX_REPLICAS - 1)))
BIG_NAME = "bench-big"
DEFAULT_SMALL_JOBS = 50


class BigJobError(RuntimeError):
    pass


@dataclass(frozen=True)
class Jobs:
    """What one phase submits: (name, shape) in order, the large one first if any."""

    submitted: tuple[tuple[str, Shape], ...]

    @property
    def children(self) -> list[str]:
        return [child for name, shape in self.submitted for child in shape.child_names(name)]


def run_big_job(settings: Settings, small: int, say: Callable[[str], None]) -> dict[str, Any]:
    """The three phases; the figures as a dict (bench/README.md)."""
    big = ((BIG_NAME, BIG_SHAPE),)
    small_jobs = tuple((name, settings.shape) for name in job_names(small))
    floor = _floor(settings, say)
    large = _operator(settings, Jobs(big), "large", say)
    alone = _operator(settings, Jobs(small_jobs), "small", say)
    together = _operator(settings, Jobs((*big, *small_jobs)), "together", say)
    big_seconds = large["jobs"][BIG_NAME]
    small_alone = [alone["jobs"][name] for name, _ in small_jobs]
    small_beside = [together["jobs"][name] for name, _ in small_jobs]
    return {
        "big_job": {
            "replicas": MAX_REPLICAS,
            "shape": BIG_SHAPE.describe(),
            "floor_create_seconds": round(floor, 3),
            "operator_create_seconds": round(big_seconds, 3),
            "ratio": round(big_seconds / floor, 2),
            "operator_create_seconds_beside_small": round(together["jobs"][BIG_NAME], 3),
        },
        "small_jobs": {
            "count": small,
            "shape": settings.shape.describe(),
            "create_to_pods_alone_seconds": summarize(small_alone),
            "create_to_pods_beside_big_seconds": summarize(small_beside),
        },
        "operator": {
            "peak_rss_mib_big_alone": large["peak_rss_mib"],
            "peak_rss_mib_small_alone": alone["peak_rss_mib"],
            "peak_rss_mib_together": together["peak_rss_mib"],
            "rss_at_ready_mib": together["rss_at_ready_mib"],
            "requests_big_alone": large["requests"],
        },
    }


def _floor(settings: Settings, say: Callable[[str], None]) -> float:
    """Seconds the API server takes to create the large job's children (phase 1)."""
    objects = list(floor_objects(NAMESPACE, [BIG_NAME], BIG_SHAPE))
    with BenchCluster(
        settings.work_dir / "big-floor", crds=list(settings.crds), nodes=settings.nodes, say=say
    ) as cluster:
        say(
            f"floor: the large job's {len(objects)} objects, {settings.floor_concurrency} in flight"
        )
        failures = asyncio.run(_create_directly(cluster, settings, objects))
        requests = audit.read(cluster.audit_log)
    if failures:
        raise BigJobError(f"{len(failures)} floor creates failed; first: {failures[0]}")
    span = floor_span(requests, len(objects))
    say(f"floor: {len(objects)} objects in {span.seconds:.2f}s")
    return span.seconds


async def _create_directly(
    cluster: BenchCluster, settings: Settings, objects: list[tuple[str, dict[str, Any]]]
) -> list[str]:
    failures: list[str] = []
    async with (
        ApiClient(cluster.user_kubeconfig(DRIVER_USER), connections=4) as driver,
        ApiClient(
            cluster.user_kubeconfig(FLOOR_USER), connections=settings.floor_concurrency
        ) as floor,
    ):
        body = tfjob(settings.api_version, BIG_NAME, BIG_SHAPE)
        await creation(driver, settings.jobs_path(NAMESPACE), body, failures)()
        if failures:
            return failures
        calls = [creation(floor, path, body, failures) for path, body in objects]
        await bounded(settings.floor_concurrency, calls)
    return failures


def _operator(
    settings: Settings, jobs: Jobs, phase: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """Phases 2 and 3: each job's TFJob created → its last child created, and the
    operator's memory."""
    with BenchCluster(
        settings.work_dir / f"big-{phase}", crds=list(settings.crds), nodes=settings.nodes,
        say=say,
    ) as cluster:  # fmt: skip
        operator = OperatorProcess(
            settings.operator,
            cluster.user_kubeconfig(OPERATOR_USER),
            cluster.state_dir / "operator.log",
            OPERATOR_USER,
        )
        identity = operator.start()
        sampler = Sampler(identity)
        sampler.start()
        try:
            operator.wait_ready(cluster.audit_log, settings.timeout, cluster.check)
            at_ready = group_usage(identity).rss_bytes
            say(f"{phase}: submitting {len(jobs.submitted)} TFJobs")
            asyncio.run(_submit_and_wait(cluster, operator, settings, jobs))
            wait_quiet(cluster.audit_log, settings.timeout)
            operator.check()
            final = sampler.stop()
        finally:
            sampler.stop()
            operator.stop()
        requests = audit.read(cluster.audit_log)
    peak = max(final.peak_rss_bytes, sampler.peak_rss_bytes()) / MIB
    operator_requests = audit.completed(requests, OPERATOR_USER)
    children = [
        r
        for kind in ("pods", "services")
        for r in audit.created(operator_requests, kind)
        if r.namespace == NAMESPACE
    ]
    if measure.distinct_names(children) != 2 * len(jobs.children):
        raise BigJobError(
            f"{phase}: the audit log shows {measure.distinct_names(children)} children "
            f"created by {OPERATOR_USER}, expected {2 * len(jobs.children)}"
        )
    created = measure.jobs_created(audit.completed(requests, DRIVER_USER), DRIVER_USER)
    received = {
        r.name: r.received
        for r in audit.completed(requests, DRIVER_USER)
        if r.verb == "create" and r.resource == "tfjobs"
    }
    done = measure.children_done(children)
    per_job = measure.per_job(created, done)
    if BIG_NAME in done:
        # The large job's span opens when its create is received, as the floor's does.
        per_job[BIG_NAME] = done[BIG_NAME] - received[BIG_NAME]
    say(f"{phase}: every child created; operator peak RSS {peak:.0f} MiB")
    return {
        "jobs": per_job,
        "peak_rss_mib": round(peak, 1),
        "rss_at_ready_mib": round(at_ready / MIB, 1),
        "requests": audit.count(operator_requests).as_dict(),
    }


async def _submit_and_wait(
    cluster: BenchCluster, operator: OperatorProcess, settings: Settings, jobs: Jobs
) -> None:
    progress = Progress.expecting(jobs.children, ())
    watches = {
        f"/api/v1/namespaces/{NAMESPACE}/pods": progress.on_pod,
        f"/api/v1/namespaces/{NAMESPACE}/services": progress.on_service,
    }
    async with driving(cluster, operator, settings, watches) as (driver, check):
        submissions = [submission(driver, settings, name, shape) for name, shape in jobs.submitted]
        await bounded(settings.driver_concurrency, submissions)
        await progress.wait_until(
            progress.all_created, "every pod and service created", settings.timeout, check
        )


def table(result: dict[str, Any]) -> str:
    """The figures as the README's table."""
    big, small, operator = result["big_job"], result["small_jobs"], result["operator"]
    alone, beside = (
        small["create_to_pods_alone_seconds"],
        small["create_to_pods_beside_big_seconds"],
    )
    rows: Sequence[tuple[str, str]] = (
        ("large job", f"{big['replicas']} replicas ({big['shape']})"),
        ("its children created: floor / operator", f"{big['floor_create_seconds']} s / "
         f"{big['operator_create_seconds']} s ({big['ratio']}x); beside the small jobs "
         f"{big['operator_create_seconds_beside_small']} s"),
        (f"{small['count']} small jobs ({small['shape']}): created → children, p50 / p99",
         f"alone {alone['p50']} / {alone['p99']} s; beside the large job {beside['p50']} / "
         f"{beside['p99']} s"),
        ("operator peak RSS", f"{operator['peak_rss_mib_big_alone']} MiB large alone, "
         f"{operator['peak_rss_mib_small_alone']} MiB small alone, "
         f"{operator['peak_rss_mib_together']} MiB together (at ready "
         f"{operator['rss_at_ready_mib']} MiB)"),
    )  # fmt: skip
    return "\n".join(f"| {what} | {value} |" for what, value in rows)
