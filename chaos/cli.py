"""`python -m chaos`: one chaos run; prints the table, writes the JSON, exits 1 on a
violation."""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from chaos.run import Settings, run
from tfjob_localcluster.binaries import cache_root

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "chaos" / "results" / "latest.json"


def parser() -> argparse.ArgumentParser:
    defaults = Settings()
    p = argparse.ArgumentParser(
        prog="python -m chaos",
        description="TFJobs on the local cluster while the operator, the API server, etcd, "
        "the kubelet and containerd are killed, paused and restarted; checks that nothing "
        "is lost.",
    )
    p.add_argument("--jobs", type=int, default=defaults.jobs, help="TFJobs in the run")
    p.add_argument(
        "--faults-per-kind", type=int, default=defaults.faults_per_kind, help="faults of each kind"
    )
    p.add_argument("--seed", type=int, default=defaults.seed, help="seeds jobs and faults")
    p.add_argument(
        "--submit-within",
        type=float,
        default=defaults.submit_within,
        help="seconds over which the jobs are submitted (default: the fault schedule's "
        "planned length)",
    )
    p.add_argument(
        "--gap",
        type=float,
        nargs=2,
        metavar=("MIN", "MAX"),
        default=defaults.gap,
        help="quiet seconds before each fault, drawn from MIN to MAX",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=defaults.settle_seconds,
        help="seconds after the last fault for every job to end",
    )
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="where the JSON goes")
    p.add_argument(
        "--keep", action="store_true", help="keep the cluster's state dir even after a pass"
    )
    return p


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = Settings(
        jobs=args.jobs,
        faults_per_kind=args.faults_per_kind,
        seed=args.seed,
        submit_within=args.submit_within,
        gap=(args.gap[0], args.gap[1]),
        settle_seconds=args.settle,
    )
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    state_dir = cache_root() / "chaos" / stamp
    state_dir.mkdir(parents=True)
    try:
        verdict = run(settings, state_dir, say)
    except BaseException:
        print(f"the run stopped; logs (operator, cluster components, pods): {state_dir}")
        raise
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(verdict.as_json(), indent=2) + "\n")
    print(verdict.table())
    print(f"JSON: {args.output}")
    if verdict.ok and not args.keep:
        shutil.rmtree(state_dir)
    else:
        print(f"logs (operator, cluster components, pods): {state_dir}")
    return 0 if verdict.ok else 1
