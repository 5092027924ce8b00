"""The release's images: each built for every platform, checked by running it, and pushed
as one index.

The check runs the image's own program on its own architecture: natively, or under
emulation for another (tfjob_localcluster.images.emulation): the operator prints its version,
the trainer imports TensorFlow and tf-keras and prints TensorFlow's version with the
machine it runs on. An image that was built but cannot start is never pushed.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from release.bases import Bases
from release.buildah import Buildah, BuildahError
from release.plan import Image, Plan
from tfjob_localcluster.host import packages
from tfjob_localcluster.host.procs import failure_excerpt
from tfjob_localcluster.images import emulation
from tfjob_localcluster.images.platforms import host_architecture, platform_args
from tfjob_operator import published

CHECK_TIMEOUT = 600
#: What each image runs, in the image's own environment, to show it works, and what its
#: output must contain.
CHECKS: dict[str, tuple[tuple[str, ...], str]] = {
    "tfjob-operator": (("tfjob-operator", "version"), "tfjob-operator {version}"),
    "tfjob-trainer": (
        (
            "python",
            "-c",
            "import platform, tensorflow as tf, tf_keras; print('tensorflow', tf.__version__, "
            "platform.machine())",
        ),
        "tensorflow ",
    ),
}
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Built:
    image: Image
    architecture: str
    local: str  # its name in buildah's storage
    seconds: float
    size: int  # bytes, uncompressed
    check: str  # what its check printed


@dataclass(frozen=True)
class Pushed:
    image: Image
    reference: str  # registry/repository:tag
    digest: str  # of the index
    platforms: tuple[Built, ...]

    @property
    def pinned(self) -> str:
        return f"{self.reference}@{self.digest}"


def labels(image: Image, version: str) -> dict[str, str]:
    """The OCI image labels of a released image."""
    return {
        "org.opencontainers.image.title": image.repository,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.source": published.SOURCE,
        "org.opencontainers.image.licenses": published.LICENSE,
    }


def local_name(image: Image, architecture: str) -> str:
    return f"localhost/tfjob-release/{image.repository}:{image.tag}-{architecture}"


class ImageBuilder:
    def __init__(
        self, plan: Plan, source: Path, buildah: Buildah, say: Callable[[str], None]
    ) -> None:
        self.plan = plan
        self.source = source
        self.buildah = buildah
        self.bases = Bases(buildah, say)
        self.say = say

    def build(self, image: Image, architecture: str) -> Built:
        dockerfile = self.source / image.dockerfile
        args = {
            "BASE": self.bases.image_id(dockerfile, architecture),
            "BUILD_BASE": self.bases.image_id(dockerfile, host_architecture()),
            **platform_args(architecture),
            **dict(image.args),
        }
        local = local_name(image, architecture)
        self.say(f"building {image.name} for linux/{architecture}")
        seconds = self.buildah.build(
            context=self.source,
            dockerfile=dockerfile,
            reference=local,
            platform=f"linux/{architecture}",
            args=args,
            labels=labels(image, self.plan.version),
        )
        size, check = self.check(image, architecture, local)
        self.say(
            f"built {image.name} for linux/{architecture} in {seconds:.0f}s "
            f"({size / 2**20:.0f} MiB): {check}"
        )
        return Built(image, architecture, local, seconds, size, check)

    def check(self, image: Image, architecture: str, local: str) -> tuple[int, str]:
        """Runs the image's check on `architecture`: the size of its files in bytes, and
        what the check printed; raises BuildahError if it fails."""
        command, expected = CHECKS[image.repository]
        expected = expected.format(version=self.plan.version)
        environment = self.buildah.inspect(local)["OCIv1"]["config"].get("Env") or []
        run = ["chroot", "$root", "/usr/bin/env", "-i", *environment, *command]
        if architecture != host_architecture():
            packages.ensure(["qemu"], say=self.say)
            run = emulation.command(run, architecture)
        # The image is mounted, run and unmounted in one private mount namespace.
        buildah = shlex.join(self.buildah.raw())
        script = "\n".join(
            (
                "set -e",
                f"c=$({buildah} from --pull=never {shlex.quote(local)})",
                f"trap '{buildah} rm \"$c\" >/dev/null' EXIT",
                f'root=$({buildah} mount "$c")',
                'du --summarize --bytes "$root"',
                " ".join('"$root"' if w == "$root" else shlex.quote(w) for w in run),
            )
        )
        done = subprocess.run(
            self.buildah.private(["sh", "-c", script]),
            capture_output=True,
            text=True,
            env=self.buildah.environment(),
            timeout=CHECK_TIMEOUT,
            check=False,
        )
        size, *printed = done.stdout.strip().splitlines() or [""]
        shown = next((line for line in printed if expected in line), None)
        if done.returncode != 0 or shown is None:
            raise BuildahError(
                f"{image.name} for linux/{architecture} does not run: expected {expected!r}, "
                f"got exit {done.returncode}:\n{failure_excerpt(done.stdout + done.stderr)}"
            )
        if image.repository == "tfjob-trainer" and not shown.endswith(MACHINES[architecture]):
            raise BuildahError(f"{image.name} for linux/{architecture} ran as {shown!r}")
        return int(size.split()[0]), shown

    def push(self, image: Image, built: list[Built]) -> Pushed:
        reference = image.reference(self.plan.registry)
        digest = self.buildah.push_index(
            f"localhost/tfjob-release/{image.repository}:{image.tag}",
            [b.local for b in built],
            reference,
            plain_http=self.plan.plain_http,
        )
        self.say(f"pushed {reference}@{digest} ({', '.join(self.plan.platforms)})")
        return Pushed(image, reference, digest, tuple(built))
