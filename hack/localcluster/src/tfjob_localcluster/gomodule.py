"""Go modules read as source: the files of a module at a pinned version, from the module proxy.

The project reads files that ship in other projects' modules (kind's node-image files,
Kubeflow's example TFJobs) instead of copying them into the tree. `go mod download` keeps
them in Go's module cache, so a second run reads them offline.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tfjob_localcluster.binaries import cache_root


class ModuleError(RuntimeError):
    """A module could not be downloaded."""


def module_dir(module: str, version: str) -> Path:
    """The directory of `module@version` in Go's module cache, downloaded if absent."""
    # Outside any go.mod, so that no module of the work tree is consulted.
    scratch = cache_root() / "src"
    scratch.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=scratch,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
        timeout=600,
        check=False,
    )
    info: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    if done.returncode != 0 or "Dir" not in info:
        raise ModuleError(f"go mod download {module}@{version}: {info.get('Error') or done.stderr}")
    return Path(info["Dir"])
