"""The Python package of a release: one wheel of `tfjob-operator`, which gives the client
and the CLI (`pip install tfjob_operator-<version>-py3-none-any.whl`; the controller's
dependencies are its extra, `[controller]`, which only the operator image installs).

Built by uv from the release's source, without build isolation's network beyond the
build backend (hatchling, from the package index); its version is the file VERSION.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tfjob_localcluster.procs import failure_excerpt

PACKAGE_DIR = "operator"


class WheelError(RuntimeError):
    """uv could not build the wheel; the message holds its output."""


def build(source: Path, out: Path, uv: str, version: str) -> Path:
    """Builds the wheel into `out` and returns its path."""
    done = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out), str(source / PACKAGE_DIR)],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise WheelError(f"uv build failed:\n{failure_excerpt(done.stdout + done.stderr)}")
    wheel = out / f"tfjob_operator-{version}-py3-none-any.whl"
    if not wheel.is_file():
        built = ", ".join(sorted(p.name for p in out.glob("*.whl"))) or "none"
        raise WheelError(f"uv build made no {wheel.name} (wheels in {out}: {built})")
    return wheel


def digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
