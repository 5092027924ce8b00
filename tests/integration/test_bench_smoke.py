"""The control-plane benchmark runs end to end at N=5 and its results hold together.

This keeps the harness working; it asserts no timing (figures come from `make bench`).
The harness starts its own control planes and kwok, so this test needs no session cluster;
the run starts in the background before the test, which waits for it
(support/early_runs.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.checkout import ROOT
from support.early_runs import EarlyRun, Finished

JOBS = 5
REPLICAS = 7  # the default shape: chief=1, worker=4, ps=2
SMOKE = EarlyRun(
    "bench-smoke",
    lambda work_dir: [
        sys.executable,
        "-m",
        "bench",
        "--n",
        str(JOBS),
        "--nodes",
        "2",
        "--output-dir",
        str(work_dir / "results"),
        "--name",
        "smoke",
        "--work-dir",
        str(work_dir / "state"),
        "--timeout",
        "300",
    ],
    timeout=840,
)


@pytest.mark.timeout(900)
@pytest.mark.early_run(SMOKE)
def test_bench_smoke_run_at_n5(early_run: Finished) -> None:
    assert early_run.returncode == 0, f"bench failed:\n{early_run.stderr[-4000:]}"
    assert not (early_run.work_dir / "state").exists(), "the cluster state dir was not cleaned up"

    doc = json.loads((early_run.work_dir / "results" / "smoke.json").read_text())
    assert doc["complete"] is True
    assert doc["error"] is None
    assert doc["settings"]["replicas"] == {"Chief": 1, "Worker": 4, "PS": 2}
    assert doc["machine"]["cpus"] >= 1
    assert doc["software"]["kubernetes"].startswith("v1.")
    (run,) = doc["runs"]
    assert run["n"] == JOBS

    floor, operator = run["floor"], run["operator"]
    children = JOBS * REPLICAS
    assert floor["objects"] == 2 * children
    # The floor's client created every child and marked every job Succeeded, once each;
    # its other requests are its responder's pod listing and watch.
    assert floor["requests"]["by_code"]["201"] == 2 * children
    assert set(floor["requests"]["by_code"]) == {"200", "201"}
    assert floor["requests"]["by_kind"]["patch tfjobs/status"] == JOBS
    assert floor["requests"]["by_kind"]["list pods"] == floor["requests"]["by_kind"]["watch pods"]

    assert operator["jobs_succeeded"] == JOBS
    assert operator["pods_created"] == operator["services_created"] == children
    assert operator["pods_left_running"] == 0
    assert operator["cleanup_seconds"] is not None
    assert run["ratio_to_floor"] == pytest.approx(
        operator["create_seconds"] / floor["create_seconds"], abs=0.01
    )
    for summary in (
        operator["create_to_pods_seconds"],
        operator["exit_to_succeeded_seconds"],
        floor["exit_to_succeeded_seconds"],
    ):
        assert summary["count"] == JOBS
        assert 0 < summary["min"] <= summary["p50"] <= summary["p99"] <= summary["max"]
    # Every job's exit→Succeeded splits into reaction, write and watch delivery.
    for phase in (floor, operator):
        split = phase["exit_split_seconds"]
        assert split["react"]["count"] == split["write"]["count"] == JOBS
        assert split["write"]["min"] > 0
        # Every exit reached the server inside the exits' window (it closes after the last
        # Succeeded, which follows every exit); a burst this small may arrive at one moment.
        received = phase["exits_received_seconds"]
        assert 0 <= received["half"] <= received["all"] < phase["exit_window"]["wall_seconds"]
    # The exits' window: every leader's exit and every job's Succeeded write is an etcd
    # update the API server timed, and the machine's cores were read over the same span.
    # The floor's responder runs in a process of its own, as the operator does.
    for phase, processes in (
        (floor, {"kube-apiserver", "etcd", "kwok", "responder"}),
        (operator, {"operator"}),
    ):
        window = phase["exit_window"]
        assert window["storage_updates"]["pods"] >= JOBS
        assert window["storage_updates"]["tfjobs"] >= JOBS
        assert window["storage_update_ms"]["pods"] > 0
        assert window["busy_cores"] > 0
        assert processes <= set(window["cpu_seconds"])
    # The operator's own metrics say where its decisions waited in the window: each job's
    # success is one decision write, reconciled after its leader's exit.
    waits = operator["exit_window"]["operator_ms"]
    assert waits["decision_writes"] >= JOBS
    assert waits["decision_write_ms"] > 0
    assert waits["queue_wait_ms"] >= 0
    assert "operator_ms" not in floor["exit_window"]

    requests = operator["requests"]
    # The API server's two records of the operator's requests agree: the audit log and
    # the priority-and-fairness count of its flow schema.
    assert requests["total"] == requests["apf_dispatched"]
    assert requests["by_kind"]["create pods"] >= children
    assert requests["by_kind"]["create services"] >= children
    assert requests["per_job"] == pytest.approx(requests["total"] / JOBS, abs=0.01)
    # The operator's own counters agree with what the API server saw it create.
    own = operator["own_metrics"]
    assert own["tfjob_operator_pods_created_total"] == children
    assert own["tfjob_operator_services_created_total"] == children

    process = operator["process"]
    assert process["peak_rss_mib"] >= process["rss_at_ready_mib"] > 0
    assert process["cpu_seconds"] > 0
    assert process["log_error_lines"] == 0, process["log_error_examples"]
    # A standby, as the chart runs it: caches filled, never leading, writing nothing.
    standby = operator["standby"]
    assert standby["leader"] == 0
    assert standby["writes"] == 0
    assert standby["requests"] > 0
    assert standby["peak_rss_mib"] >= standby["rss_at_ready_mib"] > 0

    png = (early_run.work_dir / "results" / "smoke.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert f"| {JOBS} | {2 * children} |" in early_run.stdout


def test_the_plots_font_lookup_writes_nothing_under_var_cache(tmp_path: Path) -> None:
    """matplotlib asks fc-list for the system's fonts the first time it runs, and fc-list
    run as root writes its cache to /var/cache/fontconfig. In a mount namespace of its own
    (unshare makes its mounts private), with an empty /var/cache, importing the bench's plot
    leaves it empty. `mount -n`: a plain mount records itself in /run/mount on the host."""
    script = (
        "mount -n -t tmpfs tfjob-test /var/cache && "
        f"{sys.executable} -c 'import bench.plot' && ls -A /var/cache"
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script],
        env={**os.environ, "MPLCONFIGDIR": str(tmp_path)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    # matplotlib did look for fonts: it wrote its own font list where it was told.
    assert list(tmp_path.glob("fontlist-*.json"))
