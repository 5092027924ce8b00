"""The cgroup that holds a local cluster's pods, created before its node and removed after.

The kubelet (cgroupfs driver) puts pods under its `cgroupRoot`; each cluster gets its
own (`/tfjob-localcluster-<slot>`), so two clusters never share one and the kubelet
never touches the machine's other cgroups. Cgroup directories outlive the processes in
them: the launcher removes the cluster's tree, deepest first, once its node is gone, and
the slot table (slots.py) does the same for a cluster whose owner died.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def root_name(slot: int) -> str:
    return f"/tfjob-localcluster-{slot}"


def hierarchies(mountinfo: str | None = None) -> list[Path]:
    """Mount points of every cgroup (v1) and cgroup2 hierarchy."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    found = []
    for line in text.splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def in_use(root: str) -> bool:
    """Whether the tree exists in some hierarchy."""
    return any((hierarchy / root.lstrip("/")).is_dir() for hierarchy in hierarchies())


def create(root: str) -> None:
    for hierarchy in hierarchies():
        directory = hierarchy / root.lstrip("/")
        directory.mkdir(exist_ok=True)
        # A new cpuset cgroup has no CPUs and no memory nodes until given its parent's.
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (directory / name).exists() and not (directory / name).read_text().strip():
                (directory / name).write_text((hierarchy / name).read_text())
        # cgroup v2: the controllers the pods' cgroups below need must be enabled here.
        controllers = hierarchy / "cgroup.subtree_control"
        if controllers.exists() and controllers.read_text().strip():
            (directory / "cgroup.subtree_control").write_text(
                " ".join(f"+{name}" for name in controllers.read_text().split())
            )


def remove(root: str, timeout: float = 10) -> list[Path]:
    """Removes the tree in every hierarchy; returns what could not be removed in time."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for hierarchy in hierarchies():
            top = hierarchy / root.lstrip("/")
            if not top.is_dir():
                continue
            for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
                with contextlib.suppress(OSError):  # busy: a process is still dying
                    os.rmdir(directory)
            if top.is_dir():
                left.append(top)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
