"""Starting and stopping clusters: the CLI, two clusters at once, no orphans after SIGKILL,
and the host exactly as it was afterwards (host/state.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cluster import Kubectl
from support.waiting import wait_until

from tfjob_localcluster import binaries
from tfjob_localcluster.host import network
from tfjob_localcluster.host import state as hoststate
from tfjob_localcluster.host.procs import ProcessIdentity, process_table
from tfjob_localcluster.host.slots import Slot, Slots
from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_localcluster.local.cluster import LocalCluster

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "tfjob_localcluster.cli"]


def cli_down(state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "down", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=120
    )


def slot_of(state_dir: Path) -> Slot:
    return next(s for s in Slots().live() if Path(s.state_dir) == state_dir.resolve())


def network_names(prefix: str) -> list[str]:
    return [name for name in network.link_names() if name.startswith(prefix)]


def wait_host_restored(before: hoststate.HostState, timeout: float = 30) -> None:
    wait_until(
        lambda: hoststate.difference(before, hoststate.snapshot()),
        timeout,
        lambda changed: f"the host to be as it was: {changed}",
        until=lambda changed: not changed,
        interval=0.5,
    )


def test_cli_up_is_idempotent_beside_another_cluster_and_up_after_down_restores_it(
    cluster_state_root: Path, local_cluster: LocalCluster
) -> None:
    state_dir = cluster_state_root / "cli-cluster"
    before = hoststate.snapshot()
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
        # A pod with a volume, a token and a network runs in the second cluster too.
        loaded = subprocess.run(
            [*CLI, "load", "--state-dir", str(state_dir), BUSYBOX],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr
        other("run", "probe", f"--image={BUSYBOX}", "--restart=Never", "--", "sh", "-c", "ls /")
        wait_until(
            lambda: "Completed" in other("get", "pod", "probe").stdout,
            60,
            "the second cluster's pod",
        )
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
        down = cli_down(state_dir)
    assert down.returncode == 0, down.stderr
    assert not any(p.alive() for p in processes)
    assert network_names(slot.network.prefix) == []
    wait_host_restored(before)
    assert all(Path(s.state_dir) != state_dir.resolve() for s in Slots().live())
    stopped = subprocess.run(
        [*CLI, "status", "--state-dir", str(state_dir)], capture_output=True, text=True
    )
    assert stopped.returncode == 3
    assert "not running" in stopped.stdout

    # Started again on the same state dir, it comes back with its objects and its
    # add-ons, like a rebooted machine.
    try:
        restarted = subprocess.run(
            [*CLI, "up", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=300
        )
        assert restarted.returncode == 0, restarted.stderr
        assert other("get", "pods", "-o", "name").stdout.split() == ["pod/probe"]
        dns = other("get", "service", "-n", "kube-system", "kube-dns", "-o", "json")
        assert json.loads(dns.stdout)["spec"]["clusterIP"] == "10.96.0.10"
        assert "Ready" in other("get", "node", local_cluster.node_name).stdout
    finally:
        down = cli_down(state_dir)
    assert down.returncode == 0, down.stderr
    wait_host_restored(before)


def test_sigkilled_owner_leaves_no_orphans_after_the_sweep(cluster_state_root: Path) -> None:
    state_dir = cluster_state_root / "doomed"
    before = hoststate.snapshot()
    log = (cluster_state_root / "doomed.log").open("wb")
    owner = subprocess.Popen(
        [*CLI, "run", "--state-dir", str(state_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: (state_dir / "ready").exists() or owner.poll() is not None, 180, "ready")
        assert owner.poll() is None, (cluster_state_root / "doomed.log").read_text()
        kubectl = Kubectl(binaries.locate().kubectl, state_dir / "admin.kubeconfig")
        loaded = subprocess.run(
            [*CLI, "load", "--state-dir", str(state_dir), BUSYBOX],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr
        # The container forks a child that has no parent-death signal of its own.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "forker", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": BUSYBOX,
                        "command": ["sh", "-c", "sleep 1000 & sleep 1000"],
                    }
                ]
            },
        }
        kubectl("apply", "-f", "-", input=json.dumps(pod))
        wait_until(
            lambda: "Running" in kubectl("get", "pod", "forker", "-n", "default").stdout,
            60,
            "the pod running",
        )
        slot = slot_of(state_dir)
        sleeps = [
            entry
            for entry in process_table()
            if _command(entry.pid) == b"sleep\x001000\x00" and _under(entry.pid, slot)
        ]
        assert len(sleeps) == 2
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        log.close()
    # The node's init dies with the launcher (parent-death signal), and with it its PID
    # namespace: containers, their forked children, shims; mounts and links go with it.
    wait_until(
        lambda: not any(ProcessIdentity(e.pid, e.start_ticks).alive() for e in sleeps),
        30,
        "the containers' processes to die with the node",
    )
    # The next start (here: an explicit sweep, as `down` or any claim does) removes what
    # outlives processes: the cgroups, the registry's record.
    Slots().sweep()
    assert all(Path(s.state_dir) != state_dir.resolve() for s in Slots().live())
    assert network_names(slot.network.prefix) == []
    wait_host_restored(before)


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _under(pid: int, slot: Slot) -> bool:
    """Whether the process runs in the slot's cgroup (a container of that cluster)."""
    try:
        return slot.cgroup_root in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
