"""Linux networking for a local cluster: one bridge, and a netns plus veth pair per pod.

Names carry the cluster's prefix (`tfj<slot>-`), so two clusters never collide and the
leftovers of a dead cluster can be found and removed by name. Interface names are
limited to 15 characters: `tfj255-br`, `tfj255-h254` fit.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")


class NetworkError(RuntimeError):
    pass


def _ip(*args: str, batch: str | None = None, check: bool = True) -> str:
    """Runs `ip ARGS`, or with `batch`, `ip ARGS -force -batch -` fed those lines."""
    argv = ["ip", *args]
    if batch is not None:
        argv += ["-force", "-batch", "-"]
    done = subprocess.run(argv, input=batch, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        what = batch.strip().replace("\n", "; ") if batch is not None else " ".join(args)
        raise NetworkError(f"ip {what}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


@dataclass(frozen=True)
class ClusterNetwork:
    """The addresses and names of one cluster's network (slot = registry index)."""

    slot: int
    subnet: ipaddress.IPv4Network

    @property
    def prefix(self) -> str:
        return f"tfj{self.slot}-"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    def pod_addresses(self) -> list[ipaddress.IPv4Address]:
        """Addresses pods may use: the subnet's hosts minus the gateway."""
        return [ip for ip in self.subnet.hosts() if ip != self.gateway]

    def netns_name(self, pod_uid: str) -> str:
        return f"{self.prefix}{pod_uid}"

    def veth_name(self, ip: ipaddress.IPv4Address) -> str:
        return f"{self.prefix}h{int(ip) - int(self.subnet.network_address)}"

    def netns_path(self, pod_uid: str) -> Path:
        return NETNS_DIR / self.netns_name(pod_uid)

    def etc_dir(self, pod_uid: str) -> Path:
        """`/etc/netns/<netns>`: the files `ip netns exec` would bind over /etc."""
        return NETNS_ETC / self.netns_name(pod_uid)


def create_bridge(net: ClusterNetwork) -> None:
    delete_link(net.bridge)
    _ip(
        batch=(
            f"link add {net.bridge} type bridge\n"
            f"addr add {net.gateway}/{net.subnet.prefixlen} dev {net.bridge}\n"
            f"link set {net.bridge} up\n"
        )
    )


def create_pod_network(net: ClusterNetwork, pod_uid: str, ip: ipaddress.IPv4Address) -> Path:
    """A netns holding `eth0` (address `ip`, default route via the bridge) and `lo` up."""
    netns = net.netns_name(pod_uid)
    veth = net.veth_name(ip)
    peer = f"{veth}p"
    delete_pod_network(net, pod_uid, ip)
    _ip("netns", "add", netns)
    try:
        _ip(
            batch=(
                f"link add {veth} type veth peer name {peer} netns {netns}\n"
                f"link set {veth} master {net.bridge} up\n"
            )
        )
        _ip(
            "-n",
            netns,
            batch=(
                f"link set {peer} name eth0\n"
                f"addr add {ip}/{net.subnet.prefixlen} dev eth0\n"
                "link set eth0 up\n"
                "link set lo up\n"
                f"route add default via {net.gateway}\n"
            ),
        )
    except NetworkError:
        delete_pod_network(net, pod_uid, ip)
        raise
    return net.netns_path(pod_uid)


def delete_pod_network(net: ClusterNetwork, pod_uid: str, ip: ipaddress.IPv4Address) -> None:
    netns = net.netns_name(pod_uid)
    if (NETNS_DIR / netns).exists():
        _ip("netns", "delete", netns, check=False)
    # Deleting the netns destroys the peer, and with it the host end, asynchronously.
    delete_link(net.veth_name(ip))
    shutil.rmtree(net.etc_dir(pod_uid), ignore_errors=True)


def delete_link(name: str) -> None:
    _ip("link", "delete", name, check=False)


def link_names() -> list[str]:
    return [link["ifname"] for link in json.loads(_ip("-j", "link", "show") or "[]")]


def remove_all(prefix: str) -> None:
    """Removes every netns, link and /etc/netns dir whose name starts with `prefix`."""
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():
            if entry.name.startswith(prefix):
                _ip("netns", "delete", entry.name, check=False)
    for name in link_names():
        if name.startswith(prefix):
            delete_link(name)
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.iterdir():
            if entry.name.startswith(prefix):
                shutil.rmtree(entry, ignore_errors=True)


def routed_networks() -> list[ipaddress.IPv4Network]:
    """Destinations of the host's IPv4 routes (to avoid subnets already in use)."""
    routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all") or "[]")
    networks = []
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("", "default"):
            continue
        try:
            networks.append(ipaddress.ip_network(dst, strict=False))
        except ValueError:
            continue
    return [net for net in networks if isinstance(net, ipaddress.IPv4Network)]
