"""What the local cluster could leave on the host, as one comparable snapshot.

A cluster must leave the host as it found it: no network links or routes, no network
namespaces, no mounts, no cgroups, no files under the system directories its
components use by default, no firewall rules, no changed kernel settings. The lifecycle
tests take a snapshot before a cluster starts and compare it with one after it stopped
(or after a SIGKILLed cluster was swept); `difference` names what changed.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from dataclasses import dataclass, fields, replace
from pathlib import Path

from tfjob_localcluster.host import cgroups, network, slots
from tfjob_localcluster.local.node.tunables import KUBELET_TUNABLES

# Where kubelet, containerd, CNI plugins and dockerd write by default.
WATCHED_DIRS = (
    "/run", "/var/run", "/var/lib", "/var/log", "/etc", "/opt", "/usr/libexec",
    "/run/netns", "/etc/cni", "/etc/netns",
)  # fmt: skip
# Where a machine's Docker engine keeps its container shims' sockets (containerd's
# default state directory) once it has run a container: the engine's, not a run's.
ENGINE_RUNTIME_ENTRIES = ("/run/containerd", "/var/run/containerd")
SYSCTLS = (
    *KUBELET_TUNABLES,
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
)


@dataclass(frozen=True)
class HostState:
    links: tuple[str, ...]
    routes: tuple[str, ...]
    mounts: tuple[str, ...]
    cgroups: tuple[str, ...]
    entries: tuple[str, ...]
    firewall: tuple[str, ...]
    sysctls: tuple[str, ...]


def snapshot() -> HostState:
    return HostState(
        links=tuple(sorted(link["ifname"] for link in _ip_json("link"))),
        routes=tuple(sorted(route.get("dst", "?") for route in _ip_json("-4", "route"))),
        mounts=tuple(sorted(line.split()[4] for line in _read("/proc/self/mountinfo"))),
        cgroups=tuple(
            sorted(
                str(entry)
                for hierarchy in cgroups.hierarchies()
                for entry in hierarchy.glob("tfjob-localcluster-*")
            )
        ),
        entries=tuple(
            sorted(
                str(entry)
                for directory in WATCHED_DIRS
                if Path(directory).is_dir()
                for entry in Path(directory).iterdir()
            )
        ),
        firewall=_firewall(),
        sysctls=tuple(
            f"{name}={_read(f'/proc/sys/{name}')[0] if Path('/proc/sys', name).exists() else '-'}"
            for name in SYSCTLS
        ),
    )


def without_local_clusters(state: HostState) -> HostState:
    """`state` without what running local clusters hold (their links, routes and cgroups,
    named by their slots): to compare the host before and after something else (a kind
    cluster) while local clusters come and go beside it."""
    prefixes = tuple(str(net) for net in (network.NODE_NETWORK, slots.POD_NETWORK))
    return replace(
        state,
        links=tuple(link for link in state.links if not link.startswith(network.LINK_PREFIX)),
        routes=tuple(r for r in state.routes if not _within(r, prefixes)),
        cgroups=(),
    )


def _within(route: str, networks: tuple[str, ...]) -> bool:
    try:
        destination = ipaddress.ip_network(route, strict=False)
    except ValueError:
        return False
    return any(
        isinstance(destination, ipaddress.IPv4Network)
        and destination.subnet_of(ipaddress.IPv4Network(net))
        for net in networks
    )


def difference(
    before: HostState, after: HostState, ignored_entries: tuple[str, ...] = ()
) -> dict[str, dict[str, list[str]]]:
    """Per field, what appeared and what disappeared (empty when nothing changed), but
    for the `ignored_entries` (files or directories under WATCHED_DIRS) and for entries a
    Debian package owns: a run may install the packages it needs (packages.py), and their
    files are the package's, not the run's."""
    changed = {}
    for field in fields(HostState):
        old, new = set(getattr(before, field.name)), set(getattr(after, field.name))
        if field.name == "entries":
            old, new = old - set(ignored_entries), new - set(ignored_entries)
            packaged = owned_by_packages(old ^ new)
            old, new = old - packaged, new - packaged
        if old != new:
            changed[field.name] = {"added": sorted(new - old), "removed": sorted(old - new)}
    return changed


def owned_by_packages(paths: set[str]) -> set[str]:
    """Those of `paths` that an installed Debian package owns (`dpkg-query -S`)."""
    if not paths or shutil.which("dpkg-query") is None:
        return set()
    done = subprocess.run(
        ["dpkg-query", "-S", *sorted(paths)], capture_output=True, text=True, check=False
    )
    # One line per owned path: "package[, package...]: /path"; the others go to stderr.
    owned = {line.rpartition(": ")[2] for line in done.stdout.splitlines() if ": " in line}
    return owned & paths


def _ip_json(*args: str) -> list[dict[str, str]]:
    done = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    loaded: list[dict[str, str]] = json.loads(done.stdout or "[]")
    return loaded


def _read(path: str) -> list[str]:
    return Path(path).read_text().splitlines()


def _firewall() -> tuple[str, ...]:
    """iptables-save's rules, without counters (iptables-save takes no lock file)."""
    if shutil.which("iptables-save") is None:
        return ()
    done = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False)
    return tuple(
        line.split("[")[0].strip()
        for line in done.stdout.splitlines()
        if line and not line.startswith("#")
    )
