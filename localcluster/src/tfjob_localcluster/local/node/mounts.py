"""The node's private view of the host's filesystem.

The node runs in a mount namespace of its own (the launcher starts it with `unshare`).
There it covers the directories its components write to with directories of its state
dir, so kubelet, containerd and the CNI plugins keep their standard paths
(`/var/lib/kubelet`, `/run/containerd`, `/var/lib/cni`, `/var/log/pods`, ...) while
nothing of theirs lands on the host, and everything they mounted disappears with the
namespace. Paths the node still needs under a covered directory (its state dir below
`/tmp`, say) are opened before the cover and bind-mounted back at their own paths:
whether each is a file or a directory is read from the opened path, never from a path
a mount may already hide.

Mounts are made with mount(2) directly: mount(8) would record them in the host's
`/run/mount/utab`.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from pathlib import Path

MS_RDONLY = 0x1
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_SHARED = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


class MountError(OSError):
    pass


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    encoded = [None if part is None else part.encode() for part in (source, target, fstype, data)]
    if _libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        errno = ctypes.get_errno()
        raise MountError(errno, f"mount {source} on {target} ({fstype}): {os.strerror(errno)}")


def make_rshared(path: str = "/") -> None:
    """Within this namespace only: kubelet and containerd need shared propagation."""
    mount(None, path, None, MS_REC | MS_SHARED)


def outermost(paths: Iterable[str]) -> list[str]:
    """The given absolute paths, normalized, without any that lies inside another."""
    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths}):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def cover(target: str, source: str | None, keep: Iterable[str]) -> None:
    """Mounts `source` (a directory, bound) or, if None, a fresh tmpfs over `target`,
    then binds back each path of `keep` that lies under `target` and existed before."""
    held: list[tuple[str, int]] = []
    source_fd = os.open(source, os.O_PATH | os.O_DIRECTORY) if source is not None else None
    try:
        for path in outermost(keep):
            if inside(path, target) and path != target and os.path.lexists(path):
                held.append((path, os.open(path, os.O_PATH)))
        if source_fd is None:
            mount("tmpfs", target, "tmpfs", 0, "mode=755")
        else:
            mount(f"/proc/self/fd/{source_fd}", target, None, MS_BIND | MS_REC)
        for path, fd in held:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                Path(path).touch()
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    finally:
        for _, fd in held:
            os.close(fd)
        if source_fd is not None:
            os.close(source_fd)


def bind_file(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND)
