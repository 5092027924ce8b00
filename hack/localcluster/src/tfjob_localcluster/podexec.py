"""The exec shim: becomes a pod's container process inside the pod's namespaces.

    python -m tfjob_localcluster.podexec <spec.json>

Enters the pod's network namespace (or, for exec probes and hooks, every namespace of
a running container), makes a private mount namespace with the pod's files and
volumes bind-mounted, sets hostname, uid and gid, arranges to die with the node, and
execs the container's command: the pid the node started *is* the container process.

Failures before exec are written as JSON ({"reason", "message"}) to the inherited
`error_fd` (closed on exec, so the node reads EOF when the exec succeeded).
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import signal
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


class ShimError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ShimError("StartError", f"{what}: {os.strerror(errno)}")


def _setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None, target.encode(), None, ctypes.c_ulong(flags), None
        ),
        f"mount {source} on {target}",
    )


def _prepare_target(source: str, target: str) -> None:
    """A mount point of the source's kind (a container runtime creates these too)."""
    path = Path(target)
    if Path(source).is_dir():
        path.mkdir(parents=True, exist_ok=True)
    elif not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def enter_namespaces(spec: dict[str, Any]) -> None:
    if join := spec.get("join_pid"):
        # An exec probe or hook: the running container's network, hostname and files.
        for kind, flag in (("net", CLONE_NEWNET), ("uts", CLONE_NEWUTS), ("mnt", CLONE_NEWNS)):
            _setns(f"/proc/{join}/ns/{kind}", flag)
        return
    if netns := spec.get("netns"):
        _setns(netns, CLONE_NEWNET)
    hostname = spec.get("hostname")
    _check(_libc.unshare(CLONE_NEWNS | (CLONE_NEWUTS if hostname else 0)), "unshare")
    # Nothing mounted from here on may propagate back to the host.
    _mount(None, "/", MS_REC | MS_PRIVATE)
    if hostname:
        name = hostname.encode()
        _check(_libc.sethostname(name, len(name)), "sethostname")
    mounts = sorted(spec.get("mounts", []), key=lambda m: m["target"].count("/"))
    # Every source, and every path of the environment that plays the image, is opened
    # before anything is mounted: a volume mounted on a parent of the node's state dir or
    # of the checkout (an emptyDir on /tmp, say) would otherwise hide them.
    sources = [_open_path(m["source"], "mount source") for m in mounts]
    image = {path: _open_path(path, "image path") for path in spec.get("image_paths", [])}
    # Which directories a non-root user cannot enter is read on the host's tree, before a
    # volume replaces part of it.
    closed = {p: _closed_ancestor(p) for p in image} if spec.get("uid") else {}
    for mount, fd in zip(mounts, sources, strict=True):
        source, target = mount["source"], mount["target"]
        _prepare_target(source, target)
        _mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
        if mount.get("read_only"):
            _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
        os.close(fd)
    _keep_image_visible(image, closed)


def _keep_image_visible(image: dict[str, int], closed: dict[str, str | None]) -> None:
    """Puts back the paths of the image that a volume, or a closed directory, hides.

    Here the image is the project's Python environment on the host, so its files can sit
    below a volume's mount point (a checkout under /tmp, with an emptyDir on /tmp) or
    below a directory other users cannot enter (pyenv's interpreter under /root, for a
    container with runAsUser). A closed directory is covered with a small tmpfs; a path
    no longer visible gets its mount point created (in the covering volume or tmpfs) and
    is bind-mounted back. The container sees the image, and nothing else of what covers it.
    """
    covered: set[str] = set()
    for path, fd in image.items():
        cover = closed.get(path)
        if cover is not None and cover not in covered:
            Path(cover).mkdir(parents=True, exist_ok=True)
            _check(
                _libc.mount(b"tmpfs", cover.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=755"),
                f"mount tmpfs on {cover}",
            )
            covered.add(cover)
        if not _same_file(path, fd):
            Path(path).mkdir(mode=0o755, parents=True, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        os.close(fd)


def _same_file(path: str, fd: int) -> bool:
    try:
        seen = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (seen.st_dev, seen.st_ino) == (held.st_dev, held.st_ino)


def _closed_ancestor(path: str) -> str | None:
    """The highest ancestor of `path` that others may not search, if any."""
    for parent in reversed(Path(path).parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return str(parent)
    return None


def _open_path(path: str, what: str) -> int:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ShimError("StartError", f"{what} {path} does not exist") from None


def drop_privileges(spec: dict[str, Any]) -> None:
    uid, gid = spec.get("uid"), spec.get("gid")
    if uid is None and gid is None and not spec.get("groups"):
        return
    if gid is None and uid is not None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = 0
    try:
        os.setgroups(sorted({g for g in spec.get("groups", []) if g is not None}))
        if gid is not None:
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
    except OSError as error:
        raise ShimError("StartError", f"set uid {uid} gid {gid}: {error}") from None


def die_with_parent(parent_pid: int) -> None:
    # After setuid: changing credentials clears the parent-death signal.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if os.getppid() != parent_pid:
        raise ShimError("StartError", "the node exited while the container was starting")


def run(spec: dict[str, Any]) -> None:
    cwd = spec["cwd"]
    # The node's scratch dir (the default working dir) may be hidden by a volume mounted
    # on one of its parents; the descriptor keeps it reachable.
    before = os.open(cwd, os.O_PATH | os.O_CLOEXEC) if os.path.isdir(cwd) else None
    enter_namespaces(spec)
    hidden = before is not None and not os.path.isdir(cwd)
    if not spec.get("join_pid") and not hidden:
        # Like runc: create the working directory when the image does not have it.
        Path(cwd).mkdir(parents=True, exist_ok=True)
    drop_privileges(spec)
    die_with_parent(spec["parent_pid"])
    try:
        if hidden:
            assert before is not None
            os.fchdir(before)
        else:
            os.chdir(cwd)
    except OSError as error:
        raise ShimError("StartError", f"chdir to {cwd}: {error.strerror}") from None
    if before is not None:
        os.close(before)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        raise ShimError(
            "StartError", f'exec: "{argv[0]}": executable file not found in $PATH'
        ) from None
    except OSError as error:
        raise ShimError("StartError", f'exec: "{argv[0]}": {error.strerror}') from None


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    error_fd = spec.get("error_fd")
    if error_fd is not None:
        os.set_inheritable(error_fd, False)
    try:
        run(spec)
    except ShimError as error:
        report = json.dumps({"reason": error.reason, "message": str(error)}).encode()
        if error_fd is not None:
            os.write(error_fd, report)
        else:
            sys.stderr.write(report.decode() + "\n")
        os._exit(128)


if __name__ == "__main__":
    main()
