"""Pods talk to each other on a host whose firewall drops forwarded traffic.

A running Docker engine sets the iptables FORWARD policy to DROP and makes bridged
traffic pass through iptables (`net.bridge.bridge-nf-call-iptables=1`). The node's
bridge and pods live in the node's own network namespace, with its own firewall, so the
host's policy never sees their traffic. The test sets both conditions on the host, runs
two pods that reach each other by Service name, and puts back what it changed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import Kubectl
from support.pods import PEER_PROGRAM, Pods, headless_service, pod_manifest

from tfjob_localcluster.images.catalog import TRAINER

pytestmark = pytest.mark.integration

BRIDGE_SYSCTL = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
XTABLES_LOCK = Path("/run/xtables.lock")


def iptables(*args: str) -> str:
    return subprocess.run(
        ["iptables", "-w", *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def forward_dropped_like_docker() -> Iterator[None]:
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed")
    lock_existed = XTABLES_LOCK.exists()
    policy = next(
        line.split()[2] for line in iptables("-S", "FORWARD").splitlines() if line.startswith("-P")
    )
    bridged = BRIDGE_SYSCTL.read_text().strip() if BRIDGE_SYSCTL.exists() else None
    iptables("-P", "FORWARD", "DROP")
    if bridged is not None:
        BRIDGE_SYSCTL.write_text("1")
    try:
        yield
    finally:
        iptables("-P", "FORWARD", policy)
        if bridged is not None:
            BRIDGE_SYSCTL.write_text(bridged)
        if not lock_existed:
            XTABLES_LOCK.unlink(missing_ok=True)


def test_pods_reach_each_other_while_the_host_drops_forwarded_traffic(
    forward_dropped_like_docker: None,
    pods: Pods,
    core_v1: Any,
    kubectl: Kubectl,
    namespace: str,
    project_images: tuple[str, ...],
) -> None:
    for name, peer in (("left", "right"), ("right", "left")):
        core_v1.create_namespaced_service(namespace, headless_service(name, {"peer": name}))
        pods.create(
            pod_manifest(
                name,
                ["python", "-c", PEER_PROGRAM, "1", f"{peer}.{namespace}.svc"],
                image=TRAINER,
                labels={"peer": name},
            )
        )
    for name, peer in (("left", "right"), ("right", "left")):
        pod = pods.wait_phase(name, "Succeeded", "Failed", timeout=120)
        log = kubectl("logs", "-n", namespace, name).stdout
        assert pod["status"]["phase"] == "Succeeded", log
        assert log == f"{peer}.{namespace}.svc -> {peer}\n"
