"""`python -m tfjob_localcluster.host.private_run [--etc-upper=DIR] [--read-only=PATH]...
[--bind=DIR:PATH]... COMMAND...`: COMMAND in a private /run and /opt, with --etc-upper an
/etc whose changes stay in DIR, with --read-only PATH unwritable, and with --bind DIR seen
at PATH.

Started inside a new mount namespace (`unshare --mount --propagation=private`): covers
/run and /opt with tmpfs of this namespace only (keeping visible the directory of any
path among the arguments below them), then execs COMMAND. Whatever it creates there, and
every mount it makes, stays in the namespace and goes with it:

- dockerd (engine.py): its runtime files and mounts, and the `/opt/containerd` its
  containerd creates;
- debootstrap (images/base.py): the `/proc` and `/sys` it mounts in the target, and the
  `/run/mount` that mount(8) creates.

With `--etc-upper=DIR`, /etc is an overlay of the host's /etc and DIR: what DIR holds
appears in /etc, and what the command writes there goes to DIR (Kueue, kueue.py, reads a
certificate from a fixed path under /etc). DIR's sibling `<DIR>.work` is overlayfs' own.

With `--read-only=PATH`, PATH is a read-only bind of itself: a program that would make
a directory there and can do without it (buildah's blob cache in /var/lib/containers)
leaves nothing on the host.

With `--bind=DIR:PATH`, what the command writes to PATH goes to DIR: buildah writes
temporary files in /var/tmp whatever TMPDIR says, and they go to the cache's tmp/.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tfjob_localcluster.host.packages import SYSTEM_PATH
from tfjob_localcluster.local.node.mounts import MS_BIND, MS_RDONLY, cover, mount

COVERED = ("/run", "/opt")
ETC_UPPER = "--etc-upper="
READ_ONLY = "--read-only="
BIND = "--bind="
MS_REMOUNT = 0x20


def paths_in(argv: list[str]) -> list[str]:
    """Absolute paths among the arguments, alone or as `--flag=/path` (`unix://` too)."""
    found = []
    for arg in argv:
        value = arg.split("=", 1)[1] if "=" in arg else arg
        value = value.removeprefix("unix://")
        if value.startswith("/"):
            found.append(value)
    return found


def command(
    argv: Sequence[str],
    etc_upper: Path | None = None,
    read_only: Sequence[str] = (),
    binds: Mapping[str, Path] | None = None,
) -> list[str]:
    """The command line that runs `argv` through this module in a new mount namespace;
    `binds` maps a path to the directory seen there."""
    options = [] if etc_upper is None else [f"{ETC_UPPER}{etc_upper}"]
    options += [f"{READ_ONLY}{path}" for path in read_only]
    options += [f"{BIND}{source}:{target}" for target, source in (binds or {}).items()]
    return [
        "unshare", "--mount", "--propagation=private",
        sys.executable, "-m", "tfjob_localcluster.host.private_run", *options, *argv,
    ]  # fmt: skip


def overlay_etc(upper: str) -> None:
    work = f"{upper.rstrip('/')}.work"
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    mount("overlay", "/etc", "overlay", 0, f"lowerdir=/etc,upperdir={upper},workdir={work}")


def make_read_only(path: str) -> None:
    mount(path, path, None, MS_BIND)
    mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def main() -> None:
    argv = sys.argv[1:]
    binds: list[tuple[str, str]] = []
    while argv and argv[0].startswith((ETC_UPPER, READ_ONLY, BIND)):
        option = argv.pop(0)
        if option.startswith(ETC_UPPER):
            overlay_etc(option.removeprefix(ETC_UPPER))
        elif option.startswith(READ_ONLY):
            make_read_only(option.removeprefix(READ_ONLY))
        else:
            source, target = option.removeprefix(BIND).split(":", 1)
            binds.append((target, source))
    keep = [os.path.dirname(path) for path in paths_in(argv)]
    for directory in COVERED:
        cover(directory, None, keep)
    for target, source in binds:
        cover(target, source, keep)
    os.execvpe(argv[0], argv, {**os.environ, "PATH": SYSTEM_PATH})


if __name__ == "__main__":
    main()
