"""The Debian packages the local cluster and the image builds need, installed when missing.

A fresh machine of this project's kind has none of them; `make demo` and `make test`
install them (as root, with apt) and say so. Elsewhere a missing one is an error that
names the package to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path

from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.procs import failure_excerpt

#: Debian's libfaketime, in the multiarch directory of this machine's architecture.
LIBFAKETIME = f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}/faketime/libfaketime.so.1"

# What is needed -> (a command on PATH, or an absolute path, that shows it is installed;
# the Debian package providing it).
NEEDS: dict[str, tuple[str, str]] = {
    "containerd": ("containerd", "containerd"),
    "runc": ("runc", "runc"),
    "cni-plugins": ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    "iptables": ("iptables", "iptables"),
    "docker": ("dockerd", "docker.io"),
    "debootstrap": ("debootstrap", "debootstrap"),
    # The release's image builder (release/), for every architecture.
    "buildah": ("buildah", "buildah"),
    # Programs of another architecture (emulation.py): Debian's emulators and their
    # binfmt_misc entries, registered only in namespaces of the project's.
    "qemu": ("/usr/lib/binfmt.d/qemu-aarch64.conf", "qemu-user-static"),
    # The browser tests' headless Chromium and its WebDriver (tests/support/browser.py).
    "chromium": ("chromium", "chromium"),
    "chromedriver": ("chromedriver", "chromium-driver"),
    # The chaos run's clock skew (chaos/clocks.py): a process's time shifted by LD_PRELOAD.
    "faketime": (LIBFAKETIME, "libfaketime"),
    # The completion tests' second shell (tests/integration/test_cli_completion.py).
    "zsh": ("zsh", "zsh"),
}
NODE = ("containerd", "runc", "cni-plugins", "iptables")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class PackageError(LocalClusterError):
    pass


def missing(names: Iterable[str]) -> list[str]:
    """The Debian packages providing what `names` need and is not installed."""
    return [NEEDS[name][1] for name in names if not _present(NEEDS[name][0])]


def _present(command_or_path: str) -> bool:
    if command_or_path.startswith("/"):
        return Path(command_or_path).exists()
    search = f"{os.environ.get('PATH', '')}:{SYSTEM_PATH}"
    return shutil.which(command_or_path, path=search) is not None


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
        raise PackageError(
            f"apt-get install {' '.join(wanted)} failed:\n{failure_excerpt(done.stderr)}"
        )
    return wanted
