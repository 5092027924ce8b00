"""Starting and stopping clusters: the CLI, two clusters at once, no orphans after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tfjob_localcluster import binaries, network
from tfjob_localcluster.cluster import LocalCluster
from tfjob_localcluster.procs import ProcessIdentity, process_table
from tfjob_localcluster.pytest_plugin import Kubectl
from tfjob_localcluster.registry import Registry, Slot

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "tfjob_localcluster.cli"]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def slot_of(state_dir: Path) -> Slot:
    return next(s for s in Registry().live() if Path(s.state_dir) == state_dir.resolve())


def network_names(prefix: str) -> list[str]:
    netns = [p.name for p in network.NETNS_DIR.iterdir()] if network.NETNS_DIR.is_dir() else []
    return [name for name in network.link_names() + netns if name.startswith(prefix)]


def test_cli_up_is_idempotent_beside_another_cluster_and_down_stops_it(
    tmp_path: Path, local_cluster: LocalCluster
) -> None:
    state_dir = tmp_path / "cli-cluster"
    try:
        first = subprocess.run(
            [*CLI, "up", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=300
        )
        assert first.returncode == 0, first.stderr
        kubeconfig = state_dir / "admin.kubeconfig"
        assert first.stdout == f"export KUBECONFIG={kubeconfig}\n"
        again = subprocess.run(
            [*CLI, "up", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0
        assert again.stdout == first.stdout
        assert "already running" in again.stderr

        slot = slot_of(state_dir)
        assert local_cluster.slot is not None
        assert slot.index != local_cluster.slot.index
        assert not slot.subnet.overlaps(local_cluster.slot.subnet)
        other = Kubectl(local_cluster.kubectl, kubeconfig)
        assert "Ready" in other("get", "node", local_cluster.node_name).stdout
        assert (
            "Ready"
            in Kubectl(local_cluster.kubectl, local_cluster.kubeconfig)(
                "get", "node", local_cluster.node_name
            ).stdout
        )
        status = subprocess.run(
            [*CLI, "status", "--state-dir", str(state_dir)], capture_output=True, text=True
        )
        assert status.returncode == 0
        assert "running" in status.stdout
        processes = list(slot.processes)
        assert processes
    finally:
        down = subprocess.run(
            [*CLI, "down", "--state-dir", str(state_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert not any(p.alive() for p in processes)
    assert network_names(slot.network.prefix) == []
    assert all(Path(s.state_dir) != state_dir.resolve() for s in Registry().live())
    stopped = subprocess.run(
        [*CLI, "status", "--state-dir", str(state_dir)], capture_output=True, text=True
    )
    assert stopped.returncode == 3
    assert "not running" in stopped.stdout


def test_sigkilled_owner_leaves_no_orphans_after_the_sweep(tmp_path: Path) -> None:
    state_dir = tmp_path / "doomed"
    log = (tmp_path / "owner.log").open("wb")
    owner = subprocess.Popen(
        [*CLI, "run", "--state-dir", str(state_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: (state_dir / "ready").exists() or owner.poll() is not None, "ready", 180)
        assert owner.poll() is None, (tmp_path / "owner.log").read_text()
        kubectl = Kubectl(binaries.locate().kubectl, state_dir / "admin.kubeconfig")
        # The container forks a child that has no parent-death signal of its own.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "forker", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "command": ["sh", "-c", "sleep 1000 & sleep 1000"],
                    }
                ]
            },
        }
        kubectl("apply", "-f", "-", input=json.dumps(pod))
        wait_until(
            lambda: "Running" in kubectl("get", "pod", "forker", "-n", "default").stdout,
            "the pod running",
        )
        slot = slot_of(state_dir)
        wait_until(lambda: len(slot_of(state_dir).processes) >= 6, "the container recorded")
        slot = slot_of(state_dir)
        table = process_table()
        tracked = [
            ProcessIdentity(entry.pid, entry.start_ticks)
            for group in slot.processes
            for entry in table
            if entry.pid in group.group_members(table)
        ]
        sleeps = [
            p for p in tracked if Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep")
        ]
        assert len(sleeps) == 2
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        log.close()
    # Components, the node and the container's main process die with their parents.

    def survivors() -> list[ProcessIdentity]:
        return [p for p in tracked if p.alive()]

    wait_until(lambda: all(p in sleeps for p in survivors()), "the parent-death signals", 30)
    # The next start (here: an explicit sweep, as `down` or any claim does) removes the rest.
    Registry().sweep()
    assert all(Path(s.state_dir) != state_dir.resolve() for s in Registry().live())
    wait_until(lambda: not survivors(), "the sweep to kill the forked children", 10)
    assert network_names(slot.network.prefix) == []
