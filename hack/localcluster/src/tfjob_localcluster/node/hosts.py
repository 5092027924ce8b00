"""Per-pod hosts files: the pod's own names plus the cluster's service records.

The process node has no DNS server: every pod's /etc/hosts (bind-mounted from
`/etc/netns/<netns>/hosts`) lists the names cluster DNS would answer for headless
services, derived from EndpointSlices exactly as CoreDNS derives them. Files are
rewritten in place (same inode) because a bind mount keeps pointing at the inode.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADER = """# Kubernetes-managed hosts file (tfjob-localcluster process node).
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
"""


@dataclass(frozen=True)
class Record:
    """One address of a DNS name; `namespace` is where the name lives."""

    namespace: str
    ip: str
    names: tuple[str, ...]
    short_names: tuple[str, ...]  # resolvable through the search path of `namespace` only


def service_records(
    services: Iterable[Obj], slices: Iterable[Obj], cluster_domain: str
) -> list[Record]:
    """A records of headless services and their endpoint hostnames, as CoreDNS serves them.

    Only ready endpoints count (the EndpointSlice controller already marks every
    endpoint ready for services that publish not-ready addresses). Services with a
    cluster IP are left out: the process node has no service proxy to route them.
    """
    headless = {
        (svc["metadata"]["namespace"], svc["metadata"]["name"])
        for svc in services
        if svc.get("spec", {}).get("clusterIP") == "None"
        and svc.get("spec", {}).get("type", "ClusterIP") == "ClusterIP"
    }
    records: dict[tuple[str, str, tuple[str, ...]], Record] = {}
    for endpoint_slice in slices:
        namespace = endpoint_slice["metadata"]["namespace"]
        service = (endpoint_slice["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
        if (namespace, service) not in headless or endpoint_slice.get("addressType") != "IPv4":
            continue
        base = f"{service}.{namespace}.svc"
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for ip in endpoint.get("addresses") or []:
                names = [f"{base}.{cluster_domain}", base, f"{service}.{namespace}"]
                short = [str(service)]
                record = Record(namespace, ip, tuple(names), tuple(short))
                records[(namespace, ip, record.names)] = record
                if hostname := endpoint.get("hostname"):
                    host_names = (f"{hostname}.{base}.{cluster_domain}", f"{hostname}.{base}")
                    host_record = Record(namespace, ip, host_names, (f"{hostname}.{service}",))
                    records[(namespace, ip, host_names)] = host_record
    return sorted(records.values(), key=lambda r: (r.names, r.ip))


def render(
    own_ip: str,
    own_names: Iterable[str],
    namespace: str,
    records: Iterable[Record],
    host_aliases: Iterable[Mapping[str, Any]] = (),
) -> str:
    lines = [HEADER]
    lines.append(f"{own_ip}\t{' '.join(own_names)}\n")
    for alias in host_aliases:
        if alias.get("hostnames"):
            lines.append(f"{alias['ip']}\t{' '.join(alias['hostnames'])}\n")
    lines.append("# Cluster DNS records (headless services)\n")
    for record in records:
        names = list(record.names)
        if record.namespace == namespace:
            names += record.short_names
        lines.append(f"{record.ip}\t{' '.join(names)}\n")
    return "".join(lines)


def write_in_place(path: Path, content: str) -> None:
    """Overwrites `path` keeping its inode, in a single write that never shrinks it.

    A bind mount of the file keeps seeing it; a reader sees the old or the new text,
    never an empty file (truncating first would open that window). When the new text
    is shorter it is padded with a comment line instead of truncating.
    """
    data = content.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if len(data) < size:
            padding = size - len(data)
            data += b"\n" if padding == 1 else b"#" * (padding - 1) + b"\n"
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)
