"""What one release builds and pushes, and under which names: pure data from the
command line, the version and the published names (tfjob_operator.published).

A release has one version (VERSION); it pushes each image as one multi-architecture
index (one image per platform, pushed by digest) under `<registry>/<repository>:<version>`,
the chart as an OCI artifact under `<registry>/charts/tfjob-operator`, and writes the
release's files (install.yaml, crds.yaml, the release notes) to a directory.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from tfjob_operator import published

#: The platforms a release is built for.
PLATFORMS = ("linux/amd64", "linux/arm64")
#: Semantic Versioning 2.0.0, as Helm requires of a chart's version.
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
#: host[:port], then path components, as image references name a registry.
REGISTRY = re.compile(r"^[a-zA-Z0-9.-]+(:\d+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


class PlanError(ValueError):
    """A release that cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class Image:
    """One image of the release: its Dockerfile, build arguments and name."""

    name: str  # what --images selects
    dockerfile: str  # relative to the repository root
    repository: str
    tag: str
    args: tuple[tuple[str, str], ...] = ()

    def reference(self, registry: str) -> str:
        return f"{registry}/{self.repository}:{self.tag}"


def images(version: str) -> tuple[Image, ...]:
    """Every image a release publishes."""
    return (
        Image("operator", "operator/Dockerfile", published.OPERATOR, version),
        Image("trainer", "trainer/Dockerfile", published.TRAINER, version),
        Image(
            "trainer-gpu",
            "trainer/Dockerfile",
            published.TRAINER,
            version + published.GPU_SUFFIX,
            (("TRAINER_EXTRAS", "gpu"),),
        ),
    )


@dataclass(frozen=True)
class Plan:
    version: str
    registry: str
    platforms: tuple[str, ...]
    images: tuple[Image, ...]
    out: Path

    @property
    def plain_http(self) -> bool:
        """A registry on the loopback is spoken to over plain HTTP (ociregistry.py)."""
        host = self.registry.split("/")[0].rsplit(":", 1)[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def chart(self) -> str:
        """Where the chart is pushed: `helm push` takes this, `helm install` this plus
        `/tfjob-operator`."""
        return "oci://" + self.registry + "/" + published.CHART.rsplit("/", 1)[0]

    @property
    def chart_reference(self) -> str:
        return published.chart_reference(self.registry)

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(p.split("/")[1] for p in self.platforms)


def make_plan(
    *,
    version: str,
    repository_version: str,
    registry: str,
    platforms: str,
    wanted: str,
    out: Path,
) -> Plan:
    """The release asked for, checked: the version must be the repository's (a tag
    `v1.2.3` releases VERSION 1.2.3), the registry a registry's name, the platforms and
    images known ones."""
    version = version.removeprefix("v") if version else repository_version
    if version != repository_version:
        raise PlanError(
            f"VERSION={version} but the repository is at {repository_version} (the file "
            "VERSION): release the version the files carry, or change VERSION first"
        )
    if not SEMVER.match(version):
        raise PlanError(f"{version} is not a semantic version (MAJOR.MINOR.PATCH[-pre])")
    registry = registry.removeprefix("oci://").rstrip("/")
    if not REGISTRY.match(registry):
        raise PlanError(f"REGISTRY={registry!r} is not a registry: host[:port][/organisation]")
    chosen = tuple(p.strip() for p in platforms.split(",") if p.strip())
    unknown = set(chosen) - set(PLATFORMS)
    if not chosen or unknown:
        raise PlanError(f"PLATFORMS: choose among {', '.join(PLATFORMS)}")
    every = {image.name: image for image in images(version)}
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    if not names or set(names) - set(every):
        raise PlanError(f"IMAGES: choose among {', '.join(every)}")
    return Plan(version, registry, chosen, tuple(every[n] for n in names), out)
