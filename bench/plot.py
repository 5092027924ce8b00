"""The results as a PNG: latency, creation time against the floor, and memory, against N."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.plotting import plt


def plot(doc: dict[str, Any], path: Path) -> None:
    runs = doc["runs"]
    sizes = [run["n"] for run in runs]
    ops = [run["operator"] for run in runs]
    figure, (latency, creation, memory) = plt.subplots(1, 3, figsize=(15, 4.5))

    for key, label, color in (
        ("create_to_pods_seconds", "TFJob created → all pods created", "tab:blue"),
        ("exit_to_succeeded_seconds", "leader exit → Succeeded", "tab:orange"),
    ):
        latency.plot(sizes, [op[key]["p50"] for op in ops], "o-", color=color, label=f"{label} p50")
        latency.plot(
            sizes, [op[key]["p99"] for op in ops], "s--", color=color, label=f"{label} p99"
        )
    floor_done = [run["floor"].get("exit_to_succeeded_seconds") for run in runs]
    if all(floor_done):
        latency.plot(
            sizes,
            [done["p50"] for done in floor_done],
            "^:",
            color="tab:gray",
            label="floor: leader exit → Succeeded p50",
        )
    latency.set_title("Per-job latency")
    latency.set_ylabel("seconds")

    creation.plot(sizes, [op["create_seconds"] for op in ops], "o-", label="operator")
    creation.plot(
        sizes, [run["floor"]["create_seconds"] for run in runs], "s--", label="floor (direct)"
    )
    for size, run, op in zip(sizes, runs, ops, strict=True):
        creation.annotate(
            f"{run['ratio_to_floor']:.2f}x",
            (size, op["create_seconds"]),
            textcoords="offset points",
            xytext=(-6, 6),
            ha="right",
        )
    creation.set_title("All pods and services created")
    creation.set_ylabel("seconds")

    memory.plot(sizes, [op["process"]["peak_rss_mib"] for op in ops], "o-", label="peak RSS")
    memory.plot(
        sizes, [op["process"]["rss_at_ready_mib"] for op in ops], "s--", label="RSS at start"
    )
    memory.set_title("Operator memory")
    memory.set_ylabel("MiB")
    memory.set_ylim(bottom=0)

    for axes in (latency, creation):
        axes.set_yscale("log")
    for axes in (latency, creation, memory):
        axes.set_xscale("log")
        axes.set_xticks(sizes, [str(s) for s in sizes])
        axes.set_xlabel(f"TFJobs (N), {doc['settings']['replicas_per_job']} replicas each")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(f"tfjob-operator control-plane benchmark, {doc['started'][:10]}", fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
