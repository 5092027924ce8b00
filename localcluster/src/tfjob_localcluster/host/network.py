"""The host's side of a local cluster's network: one veth pair between host and node.

The node lives in a network namespace of its own (its bridge, its pods, kube-proxy's
iptables rules are all in there), so the host's firewall, whatever its FORWARD policy,
never sees traffic between pods. The host keeps one end of the pair (`tfj<slot>-n0`,
the address the API server listens on), the node the other (its `eth0`), and the host
routes the pod subnet through the node. Names carry the cluster's prefix (`tfj<slot>-`),
so two clusters never collide and what a dead cluster left can be found by name;
interface names stay within 15 characters.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass

from tfjob_localcluster.errors import LocalClusterError

NODE_NETWORK = ipaddress.IPv4Network(
    os.environ.get("TFJOB_LOCALCLUSTER_NODE_NETWORK", "10.212.0.0/16")
)
SLOT_PREFIX_LENGTH = 24
#: Every cluster's links are named `tfj<slot>-...`.
LINK_PREFIX = "tfj"


class NetworkError(LocalClusterError):
    pass


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def node_subnets(node_network: ipaddress.IPv4Network = NODE_NETWORK) -> list[ipaddress.IPv4Network]:
    return list(node_network.subnets(new_prefix=SLOT_PREFIX_LENGTH))


@dataclass(frozen=True)
class ClusterNetwork:
    """The addresses and names of one cluster's network (slot = its index in slots.py)."""

    slot: int
    pod_subnet: ipaddress.IPv4Network
    node_subnet: ipaddress.IPv4Network

    @property
    def prefix(self) -> str:
        return f"{LINK_PREFIX}{self.slot}-"

    @property
    def host_link(self) -> str:
        return f"{self.prefix}n0"

    @property
    def node_link(self) -> str:
        """The peer's name until the node renames it `eth0`."""
        return f"{self.prefix}n0p"

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """The host's address on the link: the API server's, the node's default route."""
        return self.node_subnet.network_address + 1

    @property
    def node_ip(self) -> ipaddress.IPv4Address:
        return self.node_subnet.network_address + 2

    @property
    def node_address(self) -> str:
        return f"{self.node_ip}/{self.node_subnet.prefixlen}"


def create_node_link(net: ClusterNetwork) -> None:
    """The veth pair, its host end addressed and up; the peer waits for the node."""
    delete_link(net.host_link)
    _ip("link", "add", net.host_link, "type", "veth", "peer", "name", net.node_link)
    _ip("addr", "add", f"{net.gateway}/{net.node_subnet.prefixlen}", "dev", net.host_link)
    _ip("link", "set", net.host_link, "up")


def attach_node(net: ClusterNetwork, node_pid: int) -> None:
    """Moves the peer into the node's network namespace and routes pods through it."""
    _ip("link", "set", net.node_link, "netns", str(node_pid))
    _ip("route", "replace", str(net.pod_subnet), "via", str(net.node_ip), "dev", net.host_link)


def delete_link(name: str) -> None:
    """Deleting one end of a veth pair deletes both, and the routes through it."""
    _ip("link", "delete", name, check=False)


def link_names() -> list[str]:
    return [link["ifname"] for link in json.loads(_ip("-j", "link", "show") or "[]")]


def remove_all(prefix: str) -> None:
    """Removes every link whose name starts with `prefix`."""
    for name in link_names():
        if name.startswith(prefix):
            delete_link(name)


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
