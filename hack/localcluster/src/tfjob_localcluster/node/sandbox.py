"""A pod's sandbox: its network namespace and address, and its /etc files.

The hosts, resolv.conf and hostname files live in `/etc/netns/<netns>/` (where
`ip netns exec` also looks for them); the exec shim bind-mounts them over /etc.
Host-network pods get the same files under their pod directory.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfjob_localcluster import network
from tfjob_localcluster.node.podspec import pod_fqdn, pod_hostname

Obj = dict[str, Any]


class AddressPool:
    """Pod addresses, handed out round-robin so a freed address is reused last."""

    def __init__(self, addresses: list[ipaddress.IPv4Address]) -> None:
        self._addresses = addresses
        self._next = 0
        self._owners: dict[ipaddress.IPv4Address, str] = {}

    def allocate(self, owner: str) -> ipaddress.IPv4Address:
        for offset in range(len(self._addresses)):
            candidate = self._addresses[(self._next + offset) % len(self._addresses)]
            if candidate not in self._owners:
                self._owners[candidate] = owner
                self._next = (self._next + offset + 1) % len(self._addresses)
                return candidate
        raise RuntimeError(f"no free pod address ({len(self._addresses)} in use)")

    def release(self, address: ipaddress.IPv4Address) -> None:
        self._owners.pop(address, None)


def resolv_conf(pod: Obj, nameserver: str, cluster_domain: str) -> str | None:
    """The pod's resolv.conf by its dnsPolicy; None keeps the host's file.

    The nameserver is the bridge gateway, where nothing answers DNS: lookups of names
    that are not in the hosts file fail at once (ICMP port unreachable) instead of
    timing out, while the search path and options match a real pod's.
    """
    spec = pod["spec"]
    policy = spec.get("dnsPolicy", "ClusterFirst")
    config = spec.get("dnsConfig") or {}
    namespace = pod["metadata"]["namespace"]
    if policy == "Default" or (policy == "ClusterFirst" and spec.get("hostNetwork")):
        if not config:
            return None
        servers: list[str] = []
        searches: list[str] = []
        options: list[str] = []
    elif policy == "None":
        servers, searches, options = [], [], []
    else:
        servers = [nameserver]
        searches = [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
        options = ["ndots:5"]
    servers += config.get("nameservers") or []
    searches += config.get("searches") or []
    for option in config.get("options") or []:
        value = option.get("value")
        options.append(f"{option['name']}:{value}" if value is not None else option["name"])
    lines = [f"nameserver {server}" for server in servers]
    if searches:
        lines.append("search " + " ".join(searches))
    if options:
        lines.append("options " + " ".join(options))
    return "\n".join(lines) + "\n"


def own_names(pod: Obj, cluster_domain: str) -> list[str]:
    """Names kubelet writes for the pod itself: its FQDN (with a subdomain) and hostname."""
    fqdn = pod_fqdn(pod, cluster_domain)
    return [fqdn, pod_hostname(pod)] if fqdn else [pod_hostname(pod)]


@dataclass
class Sandbox:
    ip: ipaddress.IPv4Address
    netns: Path | None
    etc_dir: Path
    resolv_conf: bool  # whether etc_dir holds a resolv.conf to mount

    @property
    def hosts(self) -> Path:
        return self.etc_dir / "hosts"

    def mounts(self) -> list[dict[str, Any]]:
        mounts: list[dict[str, Any]] = [
            {"source": str(self.hosts), "target": "/etc/hosts", "read_only": False},
            {"source": str(self.etc_dir / "hostname"), "target": "/etc/hostname"},
        ]
        if self.resolv_conf:
            mounts.append(
                {"source": str(self.etc_dir / "resolv.conf"), "target": "/etc/resolv.conf"}
            )
        return mounts


def _write_etc(etc_dir: Path, pod: Obj, resolv: str | None) -> None:
    etc_dir.mkdir(parents=True, exist_ok=True)
    (etc_dir / "hostname").write_text(pod_hostname(pod) + "\n")
    (etc_dir / "hosts").touch()
    if resolv is not None:
        (etc_dir / "resolv.conf").write_text(resolv)


class SandboxManager:
    def __init__(
        self,
        net: network.ClusterNetwork,
        pods_dir: Path,
        cluster_domain: str,
    ) -> None:
        self.net = net
        self.pods_dir = pods_dir
        self.cluster_domain = cluster_domain
        self.pool = AddressPool(net.pod_addresses())

    async def create(self, pod: Obj, pod_dir: Path) -> Sandbox:
        uid = pod["metadata"]["uid"]
        resolv = resolv_conf(pod, str(self.net.gateway), self.cluster_domain)
        if pod["spec"].get("hostNetwork"):
            sandbox = Sandbox(self.net.gateway, None, pod_dir / "etc", resolv is not None)
        else:
            ip = self.pool.allocate(uid)
            try:
                netns = await asyncio.to_thread(network.create_pod_network, self.net, uid, ip)
            except BaseException:
                self.pool.release(ip)
                raise
            sandbox = Sandbox(ip, netns, self.net.etc_dir(uid), resolv is not None)
        await asyncio.to_thread(_write_etc, sandbox.etc_dir, pod, resolv)
        return sandbox

    async def destroy(self, pod: Obj, sandbox: Sandbox) -> None:
        if sandbox.netns is not None:
            uid = pod["metadata"]["uid"]
            await asyncio.to_thread(network.delete_pod_network, self.net, uid, sandbox.ip)
            self.pool.release(sandbox.ip)
