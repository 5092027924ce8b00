"""`python -m tfjob_localcluster.images.emulation ARCH COMMAND...`: COMMAND where programs built
for ARCH (amd64, arm64) run under QEMU's user-mode emulation, and the host is unchanged.

The kernel runs a foreign program through the interpreter a binfmt_misc entry names.
Since Linux 6.7 binfmt_misc has an instance per user namespace, so the entry is
registered in one of the command's own: a user namespace mapping the first 65536 ids
onto themselves (a root filesystem's files keep their owners), with a mount and a PID
namespace of its own, where a fresh binfmt_misc instance gets Debian's entry for ARCH
(qemu-user-static's /usr/lib/binfmt.d/qemu-<cpu>.conf, whose `F` flag opens the
interpreter at once, so it works inside a chroot). Everything goes with the namespaces:
no entry is left in the host's binfmt_misc, no mount on the host.

It makes foreign-architecture root filesystems (images/base.py: debootstrap's second
stage) and runs the release's images of another architecture to check them (release/).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.procs import set_parent_death_signal

#: An image architecture -> the CPU name of its QEMU emulator.
QEMU_CPUS = {"amd64": "x86_64", "arm64": "aarch64"}
BINFMT_DIR = Path("/usr/lib/binfmt.d")
IDS = 65536
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


class EmulationError(LocalClusterError):
    pass


def binfmt_entry(architecture: str) -> Path:
    """Debian's binfmt_misc registration for `architecture`'s emulator."""
    if architecture not in QEMU_CPUS:
        raise EmulationError(f"no emulator for architecture {architecture!r}")
    return BINFMT_DIR / f"qemu-{QEMU_CPUS[architecture]}.conf"


def command(argv: Sequence[str], architecture: str) -> list[str]:
    """The command line that runs `argv` with `architecture`'s programs emulated."""
    return [sys.executable, "-m", "tfjob_localcluster.images.emulation", architecture, *argv]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise EmulationError(f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    encoded = [None if p is None else p.encode() for p in (source, target, fstype)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, None), f"mount {target}")


def _inside(entry: bytes, argv: list[str]) -> None:
    """PID 1 of the new namespaces: registers the entry, then becomes `argv`."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", 0)
    _mount("binfmt_misc", "/proc/sys/fs/binfmt_misc", "binfmt_misc", 0)
    with open("/proc/sys/fs/binfmt_misc/register", "wb") as register:
        register.write(entry)
    os.execvp(argv[0], argv)


def main(arguments: Sequence[str]) -> int:
    architecture, *argv = arguments
    entry = binfmt_entry(architecture)
    if not entry.exists():
        raise EmulationError(f"{entry} is missing: install Debian's qemu-user-static")
    registration = entry.read_bytes().strip()
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            set_parent_death_signal()
            if os.getppid() != parent:
                os._exit(1)
            _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
            os.write(ready_write, b".")
            os.read(mapped_read, 1)
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            first = os.fork()
            if first == 0:
                set_parent_death_signal()
                _inside(registration, argv)
            _, status = os.waitpid(first, 0)
            os._exit(os.waitstatus_to_exitcode(status))
        except BaseException as error:
            print(f"emulation: {error}", file=sys.stderr)
            os._exit(125)
    os.read(ready_read, 1)
    for kind in ("uid_map", "gid_map"):
        Path(f"/proc/{child}/{kind}").write_text(f"0 0 {IDS}\n")
    os.write(mapped_write, b".")
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
