"""`python -m tfjob_localcluster.private_run COMMAND...`: COMMAND in a private /run and /opt.

Started inside a new mount namespace (`unshare --mount --propagation=private`): covers
/run and /opt with tmpfs of this namespace only (keeping visible the directory of any
path among the arguments below them), then execs COMMAND. Whatever it creates there, and
every mount it makes, stays in the namespace and goes with it:

- dockerd (engine.py): its runtime files and mounts, and the `/opt/containerd` its
  containerd creates;
- debootstrap (baseimage.py): the `/proc` and `/sys` it mounts in the target, and the
  `/run/mount` that mount(8) creates.
"""

from __future__ import annotations

import os
import sys

from tfjob_localcluster.node.mounts import cover
from tfjob_localcluster.packages import SYSTEM_PATH

COVERED = ("/run", "/opt")


def paths_in(argv: list[str]) -> list[str]:
    """Absolute paths among the arguments, alone or as `--flag=/path` (`unix://` too)."""
    found = []
    for arg in argv:
        value = arg.split("=", 1)[1] if "=" in arg else arg
        value = value.removeprefix("unix://")
        if value.startswith("/"):
            found.append(value)
    return found


def main() -> None:
    argv = sys.argv[1:]
    keep = [os.path.dirname(path) for path in paths_in(argv)]
    for directory in COVERED:
        cover(directory, None, keep)
    os.execvpe(argv[0], argv, {**os.environ, "PATH": SYSTEM_PATH})


if __name__ == "__main__":
    main()
