"""The Python package of a release: one wheel of `tfjob-operator`, which gives the client
and the CLI (`pip install tfjob_operator-<version>-py3-none-any.whl`; the controller's
dependencies are its extra, `[controller]`, which only the operator image installs).

Built by uv from the release's source, without build isolation's network beyond the
build backend (hatchling, from the package index); its version is the file VERSION, as
Python packaging normalises it (0.2.0-dev is 0.2.0.dev0 in the wheel's name).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from tfjob_localcluster.host.procs import failure_excerpt

PACKAGE_DIR = "operator"
#: The line in which uv names the wheel it built.
BUILT = re.compile(r"^Successfully built (\S+\.whl)$", re.MULTILINE)


class WheelError(RuntimeError):
    """uv could not build the wheel; the message holds its output."""


def build(source: Path, out: Path, uv: str) -> Path:
    """Builds the wheel into `out` and returns its path, as uv names it."""
    done = subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out), str(source / PACKAGE_DIR)],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise WheelError(f"uv build failed:\n{failure_excerpt(done.stdout + done.stderr)}")
    named = BUILT.search(done.stdout + done.stderr)
    wheel = Path(named.group(1)) if named else None
    if wheel is None or wheel.parent.resolve() != out.resolve() or not wheel.is_file():
        built = ", ".join(sorted(p.name for p in out.glob("*.whl"))) or "none"
        raise WheelError(
            f"uv build named no wheel of its own in {out} (wheels there: {built}):\n"
            f"{failure_excerpt(done.stdout + done.stderr)}"
        )
    return wheel


def digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
