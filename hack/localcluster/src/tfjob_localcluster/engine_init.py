"""`python -m tfjob_localcluster.engine_init DOCKERD-ARGV...`: dockerd in a private view.

Started by engine.py inside a new mount namespace (`unshare --mount`): covers /run and
/opt with tmpfs of this namespace only (keeping visible any path of the arguments below
them), so the runtime files and mounts of dockerd, and the `/opt/containerd` its
containerd creates, never appear on the host.
"""

from __future__ import annotations

import os
import sys

from tfjob_localcluster.node.mounts import cover
from tfjob_localcluster.packages import SYSTEM_PATH


def main() -> None:
    argv = sys.argv[1:]
    paths = [arg.split("=", 1)[1].removeprefix("unix://") for arg in argv if "=/" in arg]
    keep = [os.path.dirname(path) for path in paths]
    for directory in ("/run", "/opt"):
        cover(directory, None, keep)
    os.execvpe(argv[0], argv, {**os.environ, "PATH": SYSTEM_PATH})


if __name__ == "__main__":
    main()
