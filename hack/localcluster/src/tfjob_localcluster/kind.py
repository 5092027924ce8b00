"""A kind cluster running this checkout's images, for machines with Docker.

`KindCluster.create()` creates the cluster (the node image pinned in hack/versions.env),
builds the operator and trainer images with Docker and loads them into the cluster with
`kind load docker-image`; `delete()` removes it. Installing the operator is left to the
caller (the Helm chart, as users do).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tfjob_localcluster.binaries import MissingBinaryError, locate, read_versions

REPOSITORY = Path(__file__).resolve().parents[4]
#: Images built from this checkout, as the chart and the examples name them.
IMAGES = {
    "operator/Dockerfile": "tfjob-operator:0.1.0",
    "trainer/Dockerfile": "tfjob-trainer:0.1.0",
}


def unavailable() -> str | None:
    """Why a kind cluster cannot be created here, or None."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return "no container engine: `docker info` cannot reach a Docker daemon"
    try:
        locate("kind")
    except MissingBinaryError:
        return "kind is not built: run `hack/build-binaries.sh kind`"
    return None


class KindCluster:
    def __init__(
        self, workdir: Path, name: str | None = None, say: Callable[[str], None] = print
    ) -> None:
        self.kind = str(locate("kind").kind)
        self.name = name or f"tfjob-{int(time.time())}"
        self.node_image = read_versions()["KIND_NODE_IMAGE"]
        self.kubeconfig = workdir / "kind.kubeconfig"
        self.say = say

    def create(self) -> None:
        self.say(f"creating kind cluster {self.name} ({self.node_image})")
        run(
            self.kind, "create", "cluster", "--name", self.name, "--image", self.node_image,
            "--kubeconfig", str(self.kubeconfig), "--wait", "180s",
        )  # fmt: skip
        for dockerfile, image in IMAGES.items():
            self.say(f"building {image} from {dockerfile}")
            run("docker", "build", "-f", str(REPOSITORY / dockerfile), "-t", image, str(REPOSITORY))
            run(self.kind, "load", "docker-image", image, "--name", self.name)

    def delete(self) -> None:
        self.say(f"deleting kind cluster {self.name}")
        run(self.kind, "delete", "cluster", "--name", self.name, check=False)


def run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout
