"""The base each platform's images are built FROM, as a local image of buildah's.

The Dockerfiles' default base (`ARG BASE`, the official Python image) is pulled for the
platform where a registry answers (a CI runner); where none does (this project's own
machine), the equivalent made here by debootstrap is used (tfjob_localcluster.images.base;
another architecture's is made under emulation). Either way the base is handed to the
build by its image ID: one name cannot hold two platforms' images in local storage, and
the build stage takes this machine's platform's base while the final stage takes the
target's.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from release.buildah import Buildah, BuildahError
from tfjob_localcluster.binaries import cache_root
from tfjob_localcluster.images import base as baseimage

PULL_TIMEOUT = 300


def official_base(dockerfile: Path) -> str:
    """The fully qualified default of the Dockerfile's `ARG BASE=...`."""
    match = re.search(r"^ARG BASE=(\S+)$", dockerfile.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{dockerfile} has no `ARG BASE=<image>` line")
    name = match.group(1)
    first = name.split("/")[0]
    if "/" not in name:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def config_flags(changes: tuple[str, ...]) -> list[str]:
    """`buildah config` flags for Dockerfile-style `ENV K=V` and `CMD [...]` lines."""
    flags = []
    for change in changes:
        instruction, _, value = change.partition(" ")
        if instruction == "ENV":
            flags.append(f"--env={value}")
        elif instruction == "CMD":
            flags.append(f"--cmd={value}")
        else:
            raise ValueError(f"cannot apply {change!r} with buildah config")
    return flags


class Bases:
    def __init__(self, buildah: Buildah, say: Callable[[str], None]) -> None:
        self.buildah = buildah
        self.say = say
        self._found: dict[tuple[str, str], str] = {}

    def image_id(self, dockerfile: Path, architecture: str) -> str:
        """The local image ID of the base for `architecture` (pulled or made once)."""
        official = official_base(dockerfile)
        key = (official, architecture)
        if key not in self._found:
            self._found[key] = self._pull(official, architecture) or self._made_here(architecture)
        return self._found[key]

    def _pull(self, reference: str, architecture: str) -> str | None:
        try:
            pulled = self.buildah(
                "pull", "--quiet", f"--platform=linux/{architecture}", reference,
                timeout=PULL_TIMEOUT,
            )  # fmt: skip
        except (BuildahError, subprocess.TimeoutExpired):
            self.say(f"{reference} ({architecture}) cannot be pulled: using a base made here")
            return None
        return pulled.strip().splitlines()[-1]

    def _made_here(self, architecture: str) -> str:
        tar = baseimage.build_rootfs_tar(cache_root() / "images" / "base", self.say, architecture)
        digest = baseimage.digest(architecture=architecture)
        reference = f"{baseimage.REFERENCE}-{architecture}-{digest}"
        if not self.buildah.exists(reference):
            self.say(f"importing the {architecture} base into buildah's storage: {reference}")
            changes = config_flags(baseimage.IMPORT_CHANGES)
            self.buildah.import_rootfs(tar, reference, architecture, changes)
        image = self.buildah(
            "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference
        ).strip()
        self.say(f"base for {architecture}: {reference} ({shlex.quote(image[:12])})")
        return image
