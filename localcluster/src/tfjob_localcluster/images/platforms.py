"""Image platforms: this machine's architecture, and the build arguments the project's
Dockerfiles read for an image of one architecture built on another."""

from __future__ import annotations

import platform

from tfjob_localcluster.errors import LocalClusterError

#: Go's architecture names, which image platforms use, of `uname -m`'s.
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


class UnknownArchitectureError(LocalClusterError):
    pass


def host_architecture() -> str:
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise UnknownArchitectureError(f"no images are built for this machine's {machine}")
    return ARCHITECTURES[machine]


def platform_args(architecture: str) -> dict[str, str]:
    """The platform build arguments of the project's Dockerfiles, for an image of
    `architecture` built on this machine. BuildKit and newer buildahs set them by
    themselves; Docker's classic builder and buildah 1.28 need them given."""
    return {
        "BUILDPLATFORM": f"linux/{host_architecture()}",
        "TARGETPLATFORM": f"linux/{architecture}",
        "TARGETARCH": architecture,
    }
