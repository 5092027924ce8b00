"""`python -m tfjob_localcluster.local.node --config node.json`: the node's init process.

The launcher starts it as PID 1 of new PID, mount, network, UTS and IPC namespaces
(`unshare`), the way a node container starts its init. It makes the node's private
filesystem view (node/mounts.py) and kernel settings (node/tunables.py), waits for the
network link the launcher moves into its namespace, writes the components' configuration
(node/files.py), then runs containerd, the kubelet, kube-proxy and the GPU device plugin
under node/supervisor.py until it is told to stop.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from tfjob_localcluster.host.packages import SYSTEM_PATH
from tfjob_localcluster.local.node import files, mounts, tunables
from tfjob_localcluster.local.node.config import (
    CONTAINERD_SOCKET,
    INTERFACE,
    KUBELET_DIR,
    NodeConfig,
)
from tfjob_localcluster.local.node.supervisor import Component, Supervisor, say

LINK_TIMEOUT = 30.0


def private_filesystem(config: NodeConfig) -> None:
    keep = [config.state_dir, config.logs_dir, *config.keep_visible]
    mounts.make_rshared("/")
    mounts.cover("/run", None, keep)
    for target, name in (("/tmp", "tmp"), ("/var/lib", "var-lib"), ("/var/log", "var-log")):
        source = config.path(name)
        source.mkdir(parents=True, exist_ok=True)
        if target == "/tmp":
            source.chmod(0o1777)
        mounts.cover(target, str(source), keep)


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", name).write_text(value)


def network(config: NodeConfig) -> None:
    """eth0 (the link the launcher moved in), lo, the default route via the host."""
    deadline = time.monotonic() + LINK_TIMEOUT
    while not any(link["ifname"] == config.host_link for link in json.loads(ip("-j", "link"))):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the link {config.host_link} never arrived from the launcher")
        time.sleep(0.05)
    ip("link", "set", config.host_link, "name", INTERFACE)
    ip("addr", "add", config.node_address, "dev", INTERFACE)
    ip("link", "set", INTERFACE, "up")
    ip("link", "set", "lo", "up")
    ip("route", "add", "default", "via", config.gateway)
    # Namespaced: they concern this node's network only.
    write_sysctl("net/ipv4/ip_forward", "1")
    write_sysctl("net/bridge/bridge-nf-call-iptables", "1")


def write(path: Path, content: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return str(path)


def socket_answers(path: str) -> Callable[[], bool]:
    def check() -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(path)
            except OSError:
                return False
            return True

    return check


def components(config: NodeConfig) -> list[Component]:
    def yaml_file(name: str, data: dict[str, Any]) -> str:
        return write(config.path(name), yaml.safe_dump(data, sort_keys=False))

    containerd_file = write(
        config.path("containerd.toml"), tomli_w.dumps(files.containerd_config(config))
    )
    write(
        config.path("cni", f"10-{files.CNI_NETWORK}.conflist"),
        json.dumps(files.cni_conflist(config.pod_subnet), indent=2),
    )
    write(config.path("resolv.conf"), files.resolv_conf(config))
    logs = Path(config.logs_dir)
    # What the components run: runc (or its wrapper, a Python script), iptables, the CNI
    # plugins. Nothing else of the launcher's environment leaks in.
    env = {"PATH": SYSTEM_PATH}
    found: list[Component] = [
        Component(
            "containerd",
            ["containerd", "--config", containerd_file],
            logs / "containerd.log",
            env,
            ready=socket_answers(CONTAINERD_SOCKET),
        ),
        Component(
            "kubelet",
            files.kubelet_args(config, yaml_file("kubelet.yaml", files.kubelet_config(config))),
            logs / "kubelet.log",
            env,
            ready=socket_answers(f"{KUBELET_DIR}/device-plugins/kubelet.sock"),
        ),
        Component(
            "kube-proxy",
            [
                config.kube_proxy,
                f"--config={yaml_file('kube-proxy.yaml', files.kube_proxy_config(config))}",
            ],
            logs / "kube-proxy.log",
            env,
        ),
    ]
    if config.gpu_count > 0:
        found.append(
            Component(
                "gpu-device-plugin",
                [config.gpu_device_plugin, f"--count={config.gpu_count}"],
                logs / "gpu-device-plugin.log",
                env,
            )
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfjob_localcluster.local.node", description=__doc__
    )
    parser.add_argument("--config", type=Path, required=True, help="node settings (JSON)")
    args = parser.parse_args(argv)
    config = NodeConfig.load(args.config)
    if os.getpid() != 1:
        print("tfjob-localcluster node: must run as PID 1 of its namespaces", file=sys.stderr)
        return 2
    socket.sethostname(config.node_name)
    private_filesystem(config)
    shadowed = tunables.shadow(config.path("tunables"))
    if shadowed:
        say(f"kernel settings kept private to the node: {', '.join(shadowed)}")
    network(config)
    say(f"network: {INTERFACE} {config.node_address}, pods in {config.pod_subnet}")
    return Supervisor(components(config)).run()


if __name__ == "__main__":
    sys.exit(main())
