"""A short chaos run (chaos/): one fault of each kind while TFJobs run, and nothing lost;
the jobs whose pods a lost node took restart them and say why; a standby takes over from
each leader that goes, and no deposed leader writes; the operators, allowed only what the
chart's roles allow, are refused nothing, and list again when their watches expire.

The harness starts its own local cluster (its faults restart that cluster's API server and
etcd), so this test needs no session cluster; the run starts in the background before the
test, which waits for it (support/early_runs.py). `make chaos` is the full run.
"""

from __future__ import annotations

import json
import sys

import pytest
from support.early_runs import EarlyRun, Finished

from chaos.faults import FaultKind, schedule

JOBS = 6
SEED = 1
GAP = (2.0, 6.0)
CHAOS = EarlyRun(
    "chaos",
    lambda work_dir: [
        sys.executable,
        "-m",
        "chaos",
        f"--jobs={JOBS}",
        "--faults-per-kind=1",
        "--submit-within=20",
        f"--seed={SEED}",
        # Shorter quiet gaps than a full run's: one fault still ends before the next.
        "--gap",
        *(f"{seconds:g}" for seconds in GAP),
        "--settle=180",
        f"--output={work_dir / 'chaos.json'}",
    ],
    timeout=840,
)


def test_the_seed_loses_the_node_while_the_jobs_run() -> None:
    """What the run below must show of a lost node needs it lost early, while the jobs
    (submitted within 20 s) run: the seed's schedule must put it first or second."""
    kinds = [fault.kind for fault in schedule(1, GAP, SEED)]
    assert FaultKind.NODE_LOSS in kinds[:2], f"seed {SEED} loses the node late: {kinds}"


@pytest.mark.timeout(900)
@pytest.mark.early_run(CHAOS)
def test_a_short_chaos_run_loses_nothing(early_run: Finished) -> None:
    output = early_run.work_dir / "chaos.json"
    report = (
        f"stdout:\n{early_run.stdout}\nstderr (last 3000 characters):\n{early_run.stderr[-3000:]}"
    )
    assert output.exists(), report
    result = json.loads(output.read_text())
    assert result["fault_counts"] == {
        "operator-kill": 1,
        "operator-pause": 1,
        "leader-kill": 1,
        "leader-pause": 1,
        "leader-node-loss": 1,
        "rolling-update": 1,
        "apiserver-restart": 1,
        "etcd-restart": 1,
        "kubelet-restart": 1,
        "containerd-restart": 1,
        "node-loss": 1,
        "apiserver-throttle": 1,
        "watch-expiry": 1,
        "apiserver-latency": 1,
        "leader-partition": 1,
        "clock-skew": 1,
    }, report
    assert len(result["jobs"]) == JOBS
    assert {j["outcome"] for j in result["jobs"]} == {"succeeds", "fails once, retried", "fails"}
    assert result["wrong_jobs"] == [], report
    assert result["lost_terminal_states"] == [], report
    assert result["reruns_after_success"] == [], report
    assert result["duplicate_pods"] == [], report
    # The seeded schedule loses the node while jobs run: some lose a generation to it, and
    # every one of them says so (a wrong job above would have shown it otherwise).
    evicted = [j["name"] for j in result["jobs"] if j["evicted_generations"]]
    assert evicted, report
    assert all(j["explained"] for j in result["jobs"] if j["name"] in evicted), report
    assert result["evictions_without_node_loss"] == [], report
    assert result["leftovers"] == {"pods": [], "services": []}, report
    # Each takeover: a standby took the Lease, and no leader wrote after it was deposed.
    takeovers = result["takeovers"]
    assert sorted(t["kind"] for t in takeovers) == [
        "clock-skew",
        "leader-kill",
        "leader-node-loss",
        "leader-partition",
        "leader-pause",
        "rolling-update",
    ], report
    assert all(t["new"] and t["new"] != t["old"] for t in takeovers), report
    assert all(t["lease_taken"] <= 25 for t in takeovers), report
    assert result["deposed_writes"] == [], report
    # The operators run with the chart's roles only, and need nothing they do not grant.
    assert result["forbidden"] == [], report
    assert result["ok"] is True, report
    assert early_run.returncode == 0, report
