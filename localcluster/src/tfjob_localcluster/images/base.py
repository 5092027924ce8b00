"""A Python base image made here, for machines where no registry answers.

The project's Dockerfiles build FROM the official `python:3.11.*-slim-bookworm` by
default. Where it cannot be pulled, this makes an equivalent: Debian bookworm by
`debootstrap --variant=minbase` with Debian's Python 3.11 (`python3`, `python3-venv`),
trusting the host's CA bundle, so that pip and uv reach PyPI from build steps on a
machine whose egress needs its own certificate authority. The root filesystem is kept
as a tar in the cache, named by a digest of everything that shapes it (suite, packages,
mirror, the CA bundle, the recipe's version, a foreign architecture); `docker import`
or buildah turns it into an image.

For another architecture (the release's arm64 images), debootstrap's first stage
unpacks that architecture's packages and its second stage, which runs them, runs under
emulation (emulation.py), in namespaces of its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import packages, private_run
from tfjob_localcluster.host.procs import failure_excerpt
from tfjob_localcluster.images import emulation
from tfjob_localcluster.images.platforms import host_architecture

SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
RECIPE = "2"  # bump when the steps below change
REFERENCE = "tfjob.dev/debian-python:3.11-bookworm"
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    # uv trusts its own CA list unless told otherwise; pip (Debian's) trusts this one.
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    'CMD ["python3"]',
)


def digest(ca_bundle: Path = CA_BUNDLE, architecture: str | None = None) -> str:
    """The digest of the base for `architecture` (default: this machine's)."""
    recipe = "\n".join((RECIPE, SUITE, MIRROR, *PACKAGES, *IMPORT_CHANGES))
    if architecture not in (None, host_architecture()):
        recipe += f"\narchitecture={architecture}"
    hashed = hashlib.sha256(recipe.encode())
    hashed.update(ca_bundle.read_bytes())
    return hashed.hexdigest()[:16]


def tar_path(directory: Path, architecture: str | None = None) -> Path:
    architecture = architecture or host_architecture()
    suffix = "" if architecture == host_architecture() else f"-{architecture}"
    return directory / f"debian-python-{SUITE}{suffix}-{digest(architecture=architecture)}.tar"


def build_rootfs_tar(
    directory: Path, say: Callable[[str], None], architecture: str | None = None
) -> Path:
    """The root filesystem's tar for `architecture` (default: this machine's), made once
    per digest."""
    architecture = architecture or host_architecture()
    foreign = architecture != host_architecture()
    target = tar_path(directory, architecture)
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    packages.ensure(["debootstrap", "qemu"] if foreign else ["debootstrap"], say=say)
    started = time.monotonic()
    say(
        f"making a Debian {SUITE} {architecture} base with Python 3.11 by debootstrap "
        f"({'several minutes: its second stage runs emulated' if foreign else 'about a minute'})"
    )
    scratch = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=directory))
    try:
        rootfs = scratch / "rootfs"
        stage = ["--foreign", f"--arch={architecture}"] if foreign else []
        # In a mount namespace of its own: the target's /proc and /sys, and mount(8)'s
        # /run/mount, never reach the host, even if debootstrap is interrupted.
        run(
            *private_run.command([
                "debootstrap", "--variant=minbase", *stage, f"--include={','.join(PACKAGES)}",
                SUITE, str(rootfs), MIRROR,
            ])
        )  # fmt: skip
        if foreign:
            # Devices were made by the first stage; `container=lxc` tells the second not
            # to test that it may make them (a user namespace may not).
            second = ["chroot", str(rootfs), "/debootstrap/debootstrap", "--second-stage"]
            run(*emulation.command(second, architecture), env={"container": "lxc"})
        shutil.copyfile(CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for entry in (rootfs / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = scratch / "rootfs.tar"
        run("tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), ".")
        partial.replace(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for old in directory.glob(f"debian-python-{SUITE}-*.tar"):
        if old != target and old.name.rsplit("-", 1)[0] == target.name.rsplit("-", 1)[0]:
            old.unlink()
    say(f"base root filesystem ready in {time.monotonic() - started:.0f}s: {target}")
    return target


def run(*argv: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=1800,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )
    if done.returncode != 0:
        raise LocalClusterError(f"{argv[0]} failed:\n{failure_excerpt(done.stdout + done.stderr)}")
