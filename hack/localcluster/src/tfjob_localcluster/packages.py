"""The Debian packages the local cluster and the image builds need, installed when missing.

A fresh machine of this project's kind has none of them; `make demo` and `make test`
install them (as root, with apt) and say so. Elsewhere a missing one is an error that
names the package to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

# What is needed -> (a file that shows it is installed, the Debian package providing it).
NEEDS: dict[str, tuple[str, str]] = {
    "containerd": ("/usr/bin/containerd", "containerd"),
    "runc": ("/usr/sbin/runc", "runc"),
    "cni-plugins": ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    "iptables": ("/usr/sbin/iptables", "iptables"),
    "docker": ("/usr/sbin/dockerd", "docker.io"),
    "debootstrap": ("/usr/sbin/debootstrap", "debootstrap"),
}
NODE = ("containerd", "runc", "cni-plugins", "iptables")


class PackageError(RuntimeError):
    pass


def missing(names: Iterable[str]) -> list[str]:
    """The Debian packages providing what `names` need and is not installed."""
    return [NEEDS[name][1] for name in names if not Path(NEEDS[name][0]).exists()]


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        timeout=1200,
        check=False,
    )


def ensure(names: Iterable[str], say: Callable[[str], None] = print) -> list[str]:
    """Installs the packages `names` need (returns them); raises if that is impossible."""
    wanted = missing(names)
    if not wanted:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackageError(
            f"needed and not installed: {', '.join(wanted)} (Debian packages; install them "
            "as root, e.g. `apt-get install " + " ".join(wanted) + "`)"
        )
    say(f"installing Debian packages: {' '.join(wanted)} (apt-get, once per machine)")
    install = ("install", "-y", "--no-install-recommends", *wanted)
    done = _apt(*install)
    if done.returncode != 0:
        # A fresh machine may have no package lists yet.
        _apt("update")
        done = _apt(*install)
    if done.returncode != 0:
        raise PackageError(f"apt-get install {' '.join(wanted)} failed:\n{done.stderr[-3000:]}")
    return wanted
