"""Whether this machine needs the runtime workaround for a missing CAP_SYS_RESOURCE.

localcluster/runtime/runc-without-sys-resource says what the workaround does and why. It is
used only where the capability bounding set lacks CAP_SYS_RESOURCE: the node's
containerd and the project's own Docker engine register it as their runtime binary
then, and plain runc otherwise.
"""

from __future__ import annotations

from pathlib import Path

from tfjob_localcluster.checkout import RUNTIME_WRAPPER

CAP_SYS_RESOURCE = 24


def bounding_set(status: str | None = None) -> int:
    text = Path("/proc/self/status").read_text() if status is None else status
    line = next(line for line in text.splitlines() if line.startswith("CapBnd:"))
    return int(line.split()[1], 16)


def lacks_sys_resource(status: str | None = None) -> bool:
    return not bounding_set(status) & (1 << CAP_SYS_RESOURCE)


def runtime_binary() -> str:
    """What the container runtime should execute as runc on this machine."""
    return str(RUNTIME_WRAPPER) if lacks_sys_resource() else "runc"
