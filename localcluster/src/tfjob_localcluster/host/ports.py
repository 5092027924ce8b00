"""Ports for what the project starts on this host (API servers, operators, registries).

A port is picked now and bound later, sometimes minutes later (a standby operator, an API
server restarted with the port it had). Had it come from the kernel's ephemeral range, as
a bind to port 0 gives, any outgoing connection on the host could take it in between as
its source port, and the bind then fails with "address already in use". So ports are
drawn at random from below that range and below the NodePort range, where only explicit
binds go; a port is tried with a bind before it is handed out, and one process hands out
a port again only when none it has not handed out is free.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Final

#: The host's ephemeral range, and Linux's default for a host that does not say.
EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL: Final = (32768, 60999)
#: Where ports are drawn from: below the NodePort range (30000-32767) and the default
#: ephemeral range; a host whose ephemeral range reaches lower keeps the part of this
#: range outside it.
DRAWN_FROM: Sequence[int] = range(20000, 30000)

_draw = random.Random()
_handed_out: set[int] = set()


def free_ports(host: str, count: int) -> list[int]:
    """`count` distinct ports free on `host` now, outside the ephemeral range: all are held
    while they are picked."""
    probes: list[socket.socket] = []
    try:
        candidates = _candidates()
        while len(probes) < count:
            if not candidates:
                raise OSError(f"no free port left on {host} in {DRAWN_FROM}")
            port = candidates.pop()
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                probe.bind((host, port))
            except OSError:
                probe.close()
                continue
            probes.append(probe)
        ports = [int(probe.getsockname()[1]) for probe in probes]
        _handed_out.update(ports)
        return ports
    finally:
        for probe in probes:
            probe.close()


def free_port(host: str) -> int:
    return free_ports(host, 1)[0]


def _candidates() -> list[int]:
    """The ports to try, last first: those of DRAWN_FROM outside the ephemeral range, the
    ones not handed out yet in random order after those that were."""
    low, high = _ephemeral()
    usable = [p for p in DRAWN_FROM if not low <= p <= high]
    fresh = [p for p in usable if p not in _handed_out]
    again = [p for p in usable if p in _handed_out]
    _draw.shuffle(fresh)
    _draw.shuffle(again)
    return again + fresh


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
