"""Leader election (leader.py) against the real API server: operator processes of this
checkout, two candidates for one Lease in the test's namespace, watching that namespace.

One leads and reconciles; the standby fills its caches, is ready, writes nothing; when the
leader goes (SIGKILL, SIGSTOP past the lease, SIGTERM) the standby takes the Lease and the
jobs go on. The chart's two replicas, and a takeover after `kubectl delete pod`, are in
test_install.py.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.builders import shell_replica, tfjob
from support.cluster import Kubectl
from support.tfjobs import TFJobs

from harness.operator_process import OperatorCommand, OperatorProcess
from harness.promtext import counters

LEASE = "tfjob-operator-test"
LEASE_SECONDS = 15


@pytest.fixture
def candidates(
    kubeconfig: str,
    namespace: str,
    tmp_path: Path,
    tfjob_crd: Path,
    session_operator_stopped: None,
) -> Iterator[list[OperatorProcess]]:
    """Two operators electing a leader on a Lease in the test's namespace, the first
    started first (so it takes the Lease), both ready (their caches filled)."""
    started = []
    try:
        for name in ("operator-a", "operator-b"):
            command = OperatorCommand.checkout(
                "--namespace", namespace, "--leader-elect",
                f"--leader-election-namespace={namespace}", f"--leader-election-id={LEASE}",
                f"--leader-election-identity={name}",
            )  # fmt: skip
            process = OperatorProcess(command, Path(kubeconfig), tmp_path / f"{name}.log")
            process.run()
            started.append(process)
        yield started
    finally:
        for process in started:
            process.stop()


def holder(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    lease = json.loads(kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json").stdout)
    spec: dict[str, Any] = lease["spec"]
    return spec


def wait_holder(kubectl: Kubectl, namespace: str, wanted: str, timeout: float) -> float:
    """Seconds until `wanted` holds the Lease."""
    started = time.monotonic()
    while (seen := holder(kubectl, namespace).get("holderIdentity")) != wanted:
        assert time.monotonic() - started < timeout, f"{wanted} never took the Lease ({seen})"
        time.sleep(0.2)
    return time.monotonic() - started


def leading(process: OperatorProcess) -> float:
    text = process.metrics()
    assert text is not None, f"no metrics from the operator:\n{process.process.tail()}"
    return counters(text, "tfjob_operator_leader")["tfjob_operator_leader"]


def test_one_candidate_leads_and_the_standby_is_ready_and_writes_nothing(
    candidates: list[OperatorProcess],
    kubectl: Kubectl,
    namespace: str,
    kubeconfig: str,
) -> None:
    leader, standby = candidates
    assert holder(kubectl, namespace)["holderIdentity"] == "operator-a"
    assert (leading(leader), leading(standby)) == (1.0, 0.0)
    events = json.loads(
        kubectl("get", "events", "-n", namespace, "-o", "json",
                f"--field-selector=involvedObject.name={LEASE}").stdout
    )["items"]  # fmt: skip
    assert [e["reason"] for e in events] == ["LeaderElection"]
    assert events[0]["message"].startswith("operator-a became leader")
    jobs = TFJobs(kubeconfig, namespace)
    jobs.create(tfjob("led", {"Worker": shell_replica("sleep 1", 2)}))
    jobs.wait_state("led", "Succeeded", 60)
    created = counters(standby.metrics(), "tfjob_operator_pods_created")
    assert created["tfjob_operator_pods_created_total"] == 0


def test_a_killed_leaders_jobs_go_on_under_the_standby_within_the_lease(
    candidates: list[OperatorProcess],
    kubectl: Kubectl,
    namespace: str,
    kubeconfig: str,
) -> None:
    leader, standby = candidates
    jobs = TFJobs(kubeconfig, namespace)
    jobs.create(tfjob("through", {"Worker": shell_replica("sleep 25", 2)}))
    jobs.wait_state("through", "Running", 60)
    leader.kill()
    took = wait_holder(kubectl, namespace, "operator-b", LEASE_SECONDS + 10)
    assert took <= LEASE_SECONDS + 4  # expiry as the standby observed it, plus a retry
    assert leading(standby) == 1.0
    job = jobs.wait_state("through", "Succeeded", 90)
    assert job["status"]["restartCount"] == 0
    assert holder(kubectl, namespace)["leaseTransitions"] == 1


def test_a_leader_paused_past_its_lease_stops_writing_and_exits_when_it_wakes(
    candidates: list[OperatorProcess],
    kubectl: Kubectl,
    namespace: str,
    kubeconfig: str,
) -> None:
    leader, _standby = candidates
    paused = leader.process.popen
    assert paused is not None
    paused.send_signal(signal.SIGSTOP)
    try:
        wait_holder(kubectl, namespace, "operator-b", LEASE_SECONDS + 10)
        jobs = TFJobs(kubeconfig, namespace)
        jobs.create(tfjob("meanwhile", {"Worker": shell_replica("sleep 1")}))
        jobs.wait_state("meanwhile", "Succeeded", 60)
    finally:
        paused.send_signal(signal.SIGCONT)
    # Awake, it finds it has not renewed in time: it writes nothing more, and exits.
    assert paused.wait(timeout=30) == 1
    log = leader.process.tail(200)
    assert "operator-a lost the Lease" in log
    assert holder(kubectl, namespace)["holderIdentity"] == "operator-b"


def test_a_leader_stopping_gives_the_lease_up_and_the_standby_takes_it_at_once(
    candidates: list[OperatorProcess], kubectl: Kubectl, namespace: str
) -> None:
    leader, _ = candidates
    leader.stop()
    assert leader.process.popen is not None
    assert leader.process.popen.returncode == 0
    took = wait_holder(kubectl, namespace, "operator-b", 10)
    assert took < 5, "a released Lease is taken without waiting for it to expire"
