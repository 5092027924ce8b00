"""The results document (JSON) and the table printed from it."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.cluster import versions
from bench.settings import Settings

SCHEMA = 1


def machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(total_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def software() -> dict[str, Any]:
    packages: dict[str, str | None] = {}
    for name in ("aiohttp", "tfjob-operator"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {**versions().as_dict(), "python_packages": packages, "git": _git_state()}


def _git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False
        )
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "dirty_operator": bool(git("status", "--porcelain", "--", "operator")),
    }


def settings_dict(settings: Settings) -> dict[str, Any]:
    return {
        "sizes": list(settings.sizes),
        "rounds": settings.rounds,
        "replicas": settings.shape.as_dict(),
        "replicas_per_job": settings.shape.replicas_per_job,
        "api_version": settings.api_version,
        "crds": [str(p) for p in settings.crds],
        "operator_command": settings.operator.template,
        "kwok_nodes": settings.nodes,
        "floor_concurrency": settings.floor_concurrency,
        "driver_concurrency": settings.driver_concurrency,
        "timeout_seconds": settings.timeout,
    }


def document(
    settings: Settings,
    started: datetime.datetime,
    runs: list[dict[str, Any]],
    error: str | None = None,
) -> dict[str, Any]:
    finished = datetime.datetime.now(datetime.UTC)
    return {
        "schema": SCHEMA,
        "started": started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "wall_seconds": round((finished - started).total_seconds(), 1),
        "complete": error is None and len(runs) == len(settings.sizes) * settings.rounds,
        "error": error,
        "machine": machine(),
        "software": software(),
        "settings": settings_dict(settings),
        "runs": runs,
    }


def run_entry(
    size: int, round_: int, floor: dict[str, Any], operator: dict[str, Any]
) -> dict[str, Any]:
    ratio = operator["create_seconds"] / floor["create_seconds"]
    return {
        "n": size,
        "round": round_,
        "ratio_to_floor": round(ratio, 2),
        "floor": floor,
        "operator": operator,
    }


def table(doc: dict[str, Any]) -> str:
    """A Markdown table of the runs (what `make bench` prints and the README records)."""
    lines = [
        "| N | pods + services | floor | operator | ratio | create→pods p50 / p99 "
        "| exit→Succeeded p50 / p99 | floor exit→Succeeded p50 / p99 "
        "| requests / job (writes) | peak RSS | operator CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in doc["runs"]:
        op, floor = run["operator"], run["floor"]
        pods = op["create_to_pods_seconds"]
        done = op["exit_to_succeeded_seconds"]
        # Recorded before the floor measured completion: none.
        floor_done = floor.get("exit_to_succeeded_seconds")
        floor_done_text = (
            f"{floor_done['p50']:.3f} / {floor_done['p99']:.3f} s" if floor_done else "—"
        )
        lines.append(
            f"| {run['n']} | {floor['objects']} | {floor['create_seconds']:.2f} s "
            f"| {op['create_seconds']:.2f} s | {run['ratio_to_floor']:.2f}x "
            f"| {pods['p50']:.3f} / {pods['p99']:.3f} s "
            f"| {done['p50']:.3f} / {done['p99']:.3f} s | {floor_done_text} "
            f"| {op['requests']['per_job']:.1f} ({op['requests']['writes_per_job']:.1f}) "
            f"| {op['process']['peak_rss_mib']:.0f} MiB "
            f"| {op['process']['cpu_seconds_after_ready']:.1f} s |"
        )
    by_size = ratios_by_size(doc["runs"])
    if any(len(ratios) > 1 for ratios in by_size.values()):
        lines.append("")
        lines.append(
            "Median ratio over the rounds: "
            + "; ".join(
                f"N={n} {statistics.median(ratios):.2f}x "
                f"({min(ratios):.2f}-{max(ratios):.2f}x, {_rounds(len(ratios))})"
                for n, ratios in by_size.items()
            )
        )
    return "\n".join(lines)


def exit_window_table(doc: dict[str, Any]) -> str:
    """What the exits cost the machine in each phase (bench.exitwindow), floor / operator;
    empty when no run has the window (runs recorded before it was measured)."""
    lines = [
        "| N | exits → all Succeeded | half the exits in | busy cores | kube-apiserver CPU "
        "| etcd update, pods | etcd update, TFJobs | operator CPU "
        "| operator: queue / slot / answer |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in doc["runs"]:
        floor, op = run["floor"].get("exit_window"), run["operator"].get("exit_window")
        if floor is None or op is None:
            continue
        server = [w["cpu_seconds"].get("kube-apiserver") for w in (floor, op)]
        pods = [w["storage_update_ms"].get("pods") for w in (floor, op)]
        tfjobs = [w["storage_update_ms"].get("tfjobs") for w in (floor, op)]
        half = [_half_the_exits_in(run[phase]) for phase in ("floor", "operator")]
        of_cores = f" of {op['cores']}"
        lines.append(
            f"| {run['n']} | {_pair([floor['wall_seconds'], op['wall_seconds']], ' s')} "
            f"| {_pair(half, ' s')} "
            f"| {_pair([floor['busy_cores'], op['busy_cores']], of_cores)} "
            f"| {_pair(server, ' s')} | {_pair(pods, ' ms')} | {_pair(tfjobs, ' ms')} "
            f"| {op['cpu_seconds'].get('operator', 0):g} s | {_waits(op.get('operator_ms'))} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def _half_the_exits_in(phase: dict[str, Any]) -> float | None:
    """Seconds until half the exits had reached the API server (bench.measure.exits_received);
    None for a phase recorded before it was measured."""
    received = phase.get("exits_received_seconds")
    return None if received is None else float(received["half"])


def _waits(waits: dict[str, float] | None) -> str:
    """The operator's mean wait for a reconcile, for a write slot and for the API server's
    answer to a decision write (bench.exitwindow.operator_waits); a dash without them."""
    if not waits:
        return "—"
    names = ("queue_wait_ms", "decision_write_wait_ms", "decision_write_ms")
    return " / ".join("—" if waits.get(n) is None else f"{waits[n]:g}" for n in names) + " ms"


def _pair(values: list[float | None], unit: str) -> str:
    """`floor / operator` and the unit; a figure a phase lacks is a dash."""
    return " / ".join("—" if v is None else f"{v:g}" for v in values) + unit


def _rounds(count: int) -> str:
    return f"{count} round" if count == 1 else f"{count} rounds"


def ratios_by_size(runs: list[dict[str, Any]]) -> dict[int, list[float]]:
    """N -> the creation ratio of each of its rounds."""
    ratios: dict[int, list[float]] = {}
    for run in runs:
        ratios.setdefault(run["n"], []).append(run["ratio_to_floor"])
    return ratios


def header(doc: dict[str, Any]) -> str:
    m, s = doc["machine"], doc["software"]
    shape = ",".join(f"{k.lower()}={v}" for k, v in doc["settings"]["replicas"].items())
    return (
        f"{doc['started'][:10]}, {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB; "
        f"Kubernetes {s['kubernetes']}, etcd {s['etcd']}, kwok {s['kwok']}, "
        f"aiohttp {s['python_packages']['aiohttp']}; shape {shape}; "
        f"{doc['settings']['api_version']}; wall time {doc['wall_seconds']:.0f} s"
    )
