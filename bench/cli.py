"""`python -m bench`: runs the floor and the operator for each N, writes JSON and a PNG,
prints the table."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import ROOT, report
from bench.big_job import DEFAULT_SMALL_JOBS, run_big_job
from bench.big_job import table as big_job_table
from bench.cluster import served_tfjobs
from bench.floor import run_floor
from bench.operator_run import run_operator
from bench.settings import Settings
from bench.shape import DEFAULT_SHAPE, ShapeError, parse_shape
from harness.operator_process import (
    DEFAULT_COMMAND,
    DEFAULT_METRICS_URL,
    DEFAULT_READY_URL,
    OperatorCommand,
    OperatorError,
    check_template,
)
from tfjob_localcluster import binaries
from tfjob_localcluster.host import statedirs

DEFAULT_CRD = ROOT / "charts" / "tfjob-operator" / "crds" / "tfjobs.tfjob.dev.yaml"
DEFAULT_OUTPUT = ROOT / "bench" / "results"
API_VERSION = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$")


class UsageError(ValueError):
    pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Control-plane benchmark: N TFJobs through an operator on kwok nodes, "
        "against the same pods and services created directly (the floor).",
    )
    p.add_argument("--n", default="100,500,1000", help="TFJob counts, comma-separated")
    p.add_argument(
        "--replicas", default=DEFAULT_SHAPE, help=f"replicas per TFJob (default {DEFAULT_SHAPE})"
    )
    p.add_argument("--api-version", default="tfjob.dev/v1", help="the TFJob apiVersion")
    p.add_argument(
        "--crd",
        action="append",
        type=Path,
        help=f"CRD file(s) to install (repeatable; default {DEFAULT_CRD.relative_to(ROOT)})",
    )
    p.add_argument(
        "--operator-command",
        help="command that runs the operator; placeholders {kubeconfig} {health_port} "
        "{metrics_port} {python}; KUBECONFIG is set too (default: this repository's operator)",
    )
    p.add_argument(
        "--operator-ready-url",
        help="URL that answers 200 once the operator is up (default for this repository's "
        "operator: its /readyz; none for another)",
    )
    p.add_argument(
        "--operator-metrics-url",
        help="the operator's Prometheus metrics, recorded beside the API server's count",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="floor and operator phases per N, alternating; the ratio is their median (default 1)",
    )
    p.add_argument("--nodes", type=int, default=4, help="kwok nodes (default 4)")
    p.add_argument(
        "--floor-concurrency", type=int, default=32, help="floor requests in flight (default 32)"
    )
    p.add_argument(
        "--driver-concurrency",
        type=int,
        default=16,
        help="TFJob submissions and leader exits in flight (default 16)",
    )
    p.add_argument("--timeout", type=float, default=900, help="longest wait for one step, seconds")
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT)
    p.add_argument("--name", default="latest", help="results file name: NAME.json, NAME.png")
    p.add_argument(
        "--work-dir",
        type=Path,
        help="cluster state (default: a new dir in the cache, $TFJOB_CACHE/bench/)",
    )
    p.add_argument("--keep-state", action="store_true", help="keep the clusters' state dirs")
    p.add_argument(
        "--big-job",
        action="store_true",
        help="instead of the N runs: one TFJob at the replica bound beside --small-jobs TFJobs "
        "of --replicas, against the large job's floor (bench/big_job.py)",
    )
    p.add_argument(
        "--small-jobs",
        type=int,
        default=DEFAULT_SMALL_JOBS,
        help=f"with --big-job: the small TFJobs beside it (default {DEFAULT_SMALL_JOBS})",
    )
    p.add_argument(
        "--no-standby",
        dest="standby",
        action="store_false",
        help="run this repository's operator alone, without leader election (default: a "
        "leader and a standby, as the chart runs them; another operator always runs alone)",
    )
    return p


def settings_from(args: argparse.Namespace, work_dir: Path) -> Settings:
    """Checks every option before anything starts; raises UsageError."""
    try:
        sizes = tuple(int(part) for part in args.n.split(","))
    except ValueError:
        raise UsageError(f"--n {args.n!r}: not a comma-separated list of numbers") from None
    if not sizes or any(size < 1 for size in sizes):
        raise UsageError(f"--n {args.n!r}: every N must be at least 1")
    if max(sizes) > 99999:
        raise UsageError(f"--n {args.n!r}: at most 99999 TFJobs (job names have 5 digits)")
    try:
        shape = parse_shape(args.replicas)
    except ShapeError as error:
        raise UsageError(f"--replicas: {error}") from None
    if not API_VERSION.match(args.api_version):
        raise UsageError(f"--api-version {args.api_version!r}: expected GROUP/VERSION")
    crds = tuple(args.crd or [DEFAULT_CRD])
    for crd in crds:
        if not crd.is_file():
            raise UsageError(f"--crd {crd}: no such file")
    if not served_tfjobs(crds, args.api_version):
        raise UsageError(
            f"no CRD in {', '.join(map(str, crds))} serves tfjobs at {args.api_version}"
        )
    custom = args.operator_command is not None
    template = args.operator_command if custom else DEFAULT_COMMAND
    try:
        check_template(template)
    except OperatorError as error:
        raise UsageError(f"--operator-command: {error}") from None
    for name in ("rounds", "nodes", "floor_concurrency", "driver_concurrency"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not 1 <= args.nodes <= 64:
        raise UsageError("--nodes must be within 1..64")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return Settings(
        sizes=sizes,
        rounds=args.rounds,
        shape=shape,
        api_version=args.api_version,
        crds=tuple(c.resolve() for c in crds),
        operator=OperatorCommand(
            template=template,
            ready_url=args.operator_ready_url or (None if custom else DEFAULT_READY_URL),
            metrics_url=args.operator_metrics_url or (None if custom else DEFAULT_METRICS_URL),
        ),
        nodes=args.nodes,
        floor_concurrency=args.floor_concurrency,
        driver_concurrency=args.driver_concurrency,
        timeout=args.timeout,
        work_dir=work_dir,
        standby=args.standby and not custom,
    )


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.work_dir is not None and args.work_dir.exists() and any(args.work_dir.iterdir()):
        # A control plane reuses the etcd data it finds: an old run's objects would count.
        print(f"error: --work-dir {args.work_dir} is not empty", file=sys.stderr)
        return 2
    work_dir = args.work_dir or statedirs.new_state_dir("bench", "run-")
    try:
        settings = settings_from(args, work_dir.resolve())
        binaries.locate(*binaries.CONTROL_PLANE, "kwok")
    except (UsageError, binaries.MissingBinaryError) as error:
        print(f"error: {error}", file=sys.stderr)
        if args.work_dir is None:
            statedirs.remove(work_dir)
        return 2
    json_path = args.output_dir / f"{args.name}.json"
    png_path = args.output_dir / f"{args.name}.png"
    started = datetime.datetime.now(datetime.UTC)
    runs: list[dict[str, Any]] = []
    say(f"state in {work_dir}; results to {json_path}")
    if args.big_job:
        return _big_job(settings, args, work_dir, json_path, started)
    try:
        for size in settings.sizes:
            for round_ in range(1, settings.rounds + 1):
                of = f" (round {round_} of {settings.rounds})" if settings.rounds > 1 else ""
                say(f"N={size}: floor{of}")
                floor = run_floor(settings, size, round_, say)
                say(f"N={size}: operator{of}")
                operator = run_operator(settings, size, round_, say)
                runs.append(report.run_entry(size, round_, floor, operator))
                _write(json_path, report.document(settings, started, runs))
    except (Exception, KeyboardInterrupt) as error:
        _write(json_path, report.document(settings, started, runs, error=repr(error)))
        say(f"failed: {error}")
        if args.work_dir is None:
            statedirs.keep(work_dir)
        say(f"cluster state and logs kept in {work_dir}; partial results in {json_path}")
        return 1
    doc = report.document(settings, started, runs)
    _write(json_path, doc)
    from bench.plot import plot  # matplotlib's import is slow: only when there is a plot

    plot(doc, png_path)
    _leave_state(args, work_dir)
    print(report.header(doc))
    print()
    print(report.table(doc))
    window = report.exit_window_table(doc)
    if window:
        print(
            "\nFrom the first leader exit until every TFJob is seen Succeeded, floor / operator:\n"
        )
        print(window)
    print(f"\nresults: {json_path}, {png_path}")
    return 0


def _big_job(
    settings: Settings,
    args: argparse.Namespace,
    work_dir: Path,
    json_path: Path,
    started: datetime.datetime,
) -> int:
    """`--big-job`: its three phases, their JSON and table."""
    alone = replace(settings, standby=False)
    try:
        result = run_big_job(alone, args.small_jobs, say)
    except (Exception, KeyboardInterrupt) as error:
        _write(json_path, {**report.document(alone, started, [], error=repr(error))})
        say(f"failed: {error}")
        if args.work_dir is None:
            statedirs.keep(work_dir)
        say(f"cluster state and logs kept in {work_dir}")
        return 1
    doc = {**report.document(alone, started, []), "complete": True, "big_job": result}
    _write(json_path, doc)
    _leave_state(args, work_dir)
    print(report.header(doc))
    print()
    print(big_job_table(result))
    print(f"\nresults: {json_path}")
    return 0


def _leave_state(args: argparse.Namespace, work_dir: Path) -> None:
    """A run that ended well removes its clusters' state, unless --keep-state keeps it."""
    if not args.keep_state:
        statedirs.remove(work_dir)
    elif args.work_dir is None:
        statedirs.keep(work_dir)


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(json.dumps(doc, indent=1) + "\n")
    scratch.replace(path)
