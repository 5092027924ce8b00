"""Go modules read as source: the files of a module at a pinned version, from the module proxy.

The project reads files that ship in other projects' modules (kind's node-image files,
Kubeflow's example TFJobs) instead of copying them into the tree. `go mod download` keeps
them in Go's module cache, so a second run reads them offline. That cache (in GOPATH) and
Go's build cache are the project's (`$TFJOB_CACHE/go/`, `go-build/`), as in
hack/build-binaries.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.errors import LocalClusterError


class ModuleError(LocalClusterError):
    """A module could not be downloaded."""


def go_env() -> dict[str, str]:
    """The environment `go` runs in: the pinned toolchain, GOPATH (with the module cache)
    and the build cache under the project's cache unless set, a module cache that `rm -rf`
    can remove, and the toolchain's usage counters in the cache's config/ (GOENV keeps the
    user's `go env -w` settings, which live beside them by default)."""
    tmp = cache_root() / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    user_config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return {
        **os.environ,
        "GOENV": os.environ.get("GOENV") or str(Path(user_config) / "go" / "env"),
        "XDG_CONFIG_HOME": str(cache_root() / "config"),
        "GOPATH": os.environ.get("GOPATH") or str(cache_root() / "go"),
        "GOCACHE": os.environ.get("GOCACHE") or str(cache_root() / "go-build"),
        "GOTMPDIR": str(tmp),
        "GOFLAGS": "-mod=mod -modcacherw",
        "GOTOOLCHAIN": "local",
    }


def module_dir(module: str, version: str) -> Path:
    """The directory of `module@version` in Go's module cache, downloaded if absent."""
    # Outside any go.mod, so that no module of the work tree is consulted.
    scratch = cache_root() / "src"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=scratch,
            capture_output=True,
            text=True,
            env=go_env(),
            timeout=600,
            check=False,
        )
    except FileNotFoundError:
        raise ModuleError(f"go mod download {module}@{version}: `go` is not on PATH") from None
    info: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    if done.returncode != 0 or "Dir" not in info:
        raise ModuleError(f"go mod download {module}@{version}: {info.get('Error') or done.stderr}")
    return Path(info["Dir"])
