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
    # Every mount source and every host path the container must see (the environment that
    # plays the image, the default working dir) is opened before anything is mounted: a
    # volume mounted on a parent of the node's state dir or of the checkout (an emptyDir
    # on /tmp, say) would otherwise hide them.
    sources = [_open_path(m["source"], "mount source") for m in mounts]
    host = {path: _open_path(path, "host path") for path in spec.get("host_paths", [])}
    if spec.get("uid"):
        _cover_closed_directories(host)
    for mount, fd in zip(mounts, sources, strict=True):
        source, target = mount["source"], mount["target"]
        _prepare_target(source, target)
        _mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
        if mount.get("read_only"):
            _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
        os.close(fd)
    _put_back_hidden(host)


def _cover_closed_directories(host: dict[str, int]) -> None:
    """Covers each directory a non-root user cannot enter on the way to a host path
    (/root, for pyenv's interpreter) with a small tmpfs: the user sees nothing of it but
    what `_put_back_hidden` binds back."""
    for cover in sorted({c for c in map(_closed_ancestor, host) if c is not None}):
        _check(
            _libc.mount(b"tmpfs", cover.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=755"),
            f"mount tmpfs on {cover}",
        )


def _put_back_hidden(host: dict[str, int]) -> None:
    """Binds back, at its own path, each host path a volume or a cover now hides.

    Here the image is the project's Python environment on the host, so its files can sit
    below a volume's mount point (a checkout under /tmp, with an emptyDir on /tmp). The
    mount point is created in what covers it, so the container sees the path and nothing
    else of what lies beside it on the host.
    """
    for path, fd in host.items():
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
    enter_namespaces(spec)
    if not spec.get("join_pid"):
        # Like runc: create the working directory when the image does not have it.
        Path(cwd).mkdir(parents=True, exist_ok=True)
    drop_privileges(spec)
    die_with_parent(spec["parent_pid"])
    try:
        os.chdir(cwd)
    except OSError as error:
        raise ShimError("StartError", f"chdir to {cwd}: {error.strerror}") from None
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
