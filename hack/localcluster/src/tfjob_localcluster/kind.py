"""A kind cluster running this checkout's images.

`KindCluster.create()` finds a Docker engine (engine.py: the machine's, else the
project's own, installed and started where the machine allows), gets the node image
(kindnode.py: the published one, else one assembled here), creates the cluster with the
pinned kind, and loads the images built by `make images` with `kind load docker-image`.
`delete()` deletes the cluster and, if this run made it, the `kind` network, and stops the
engine if it is the project's own. Installing the operator is left to the caller
(the Helm chart, as users do).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tfjob_localcluster import engine, kindnode, packages
from tfjob_localcluster.binaries import MissingBinaryError, locate
from tfjob_localcluster.images import ImageStore, MissingImageError

CREATE_TIMEOUT = 900
#: The Docker network kind puts its nodes on.
NETWORK = "kind"
#: The label kind puts on every container of a cluster.
CLUSTER_LABEL = "io.x-k8s.kind.cluster"


class KindError(RuntimeError):
    pass


def unavailable() -> str | None:
    """Why a kind cluster cannot be created here, or None."""
    try:
        locate("kind")
    except MissingBinaryError:
        return "kind is not built: run `hack/build-binaries.sh kind`"
    if engine.answers():
        return None
    if os.geteuid() != 0:
        return "no Docker engine answers (`docker info`), and starting one needs root"
    if packages.missing(["docker"]) and shutil.which("apt-get") is None:
        return "no Docker engine answers, and docker.io cannot be installed (no apt-get)"
    return None


class KindCluster:
    def __init__(
        self, workdir: Path, name: str | None = None, say: Callable[[str], None] = print
    ) -> None:
        self.kind = str(locate("kind").kind)
        self.name = name or f"tfjob-{int(time.time())}"
        self.kubeconfig = workdir / "kind.kubeconfig"
        self.say = say
        self.engine = engine.DockerEngine(say=say)
        self.store = ImageStore(say=say)
        self.node_image = ""
        self.engine_started = False
        self.network_existed = True

    def start_engine(self) -> None:
        """Finds or starts the Docker engine (installing docker.io where it must); once."""
        if self.engine_started:
            return
        try:
            self.engine.__enter__()
        except (engine.EngineUnavailableError, packages.PackageError) as error:
            raise KindError(str(error)) from error
        self.engine_started = True

    def create(self, images: Iterable[str]) -> None:
        """Creates the cluster and loads `images` (built by `make images`) into it.
        Raises KindError saying what was missing or failed."""
        started = time.monotonic()
        self.start_engine()
        try:
            self.node_image = kindnode.ensure(self.engine, self.store, self.say)
        except (kindnode.NodeImageError, MissingImageError) as error:
            raise KindError(str(error)) from error
        self.network_existed = self._network_exists()
        self.say(f"creating kind cluster {self.name} from {self.node_image}")
        self._kind(
            "create", "cluster", "--name", self.name, "--image", self.node_image,
            "--kubeconfig", str(self.kubeconfig), "--wait", "300s",
        )  # fmt: skip
        for image in images:
            self.store.load_into(self.engine, image)
            self._kind("load", "docker-image", image, "--name", self.name)
        self.say(f"kind cluster {self.name} ready in {time.monotonic() - started:.0f}s")

    def delete(self) -> None:
        """Deletes the cluster; leaves no container, network or engine of the run."""
        try:
            self.say(f"deleting kind cluster {self.name}")
            # With no --kubeconfig, kind edits $KUBECONFIG or ~/.kube/config (making ~/.kube).
            self._kind(
                "delete", "cluster", "--name", self.name, "--kubeconfig", str(self.kubeconfig)
            )
            left = self.containers()
            if left:
                raise KindError(f"containers of kind cluster {self.name} left: {left}")
            if not self.network_existed:
                # kind makes its network once and keeps it: the engine is left as it was
                # found (the removal fails, harmlessly, while another kind cluster uses it).
                self.engine.docker("network", "rm", NETWORK, check=False)
        finally:
            self.engine.__exit__(None, None, None)
            self.engine_started = False

    def containers(self) -> list[str]:
        mine = f"label={CLUSTER_LABEL}={self.name}"
        listed = self.engine.docker("ps", "--all", "--filter", mine, "--format", "{{.Names}}")
        return listed.split()

    def _network_exists(self) -> bool:
        named = f"name=^{NETWORK}$"
        return bool(self.engine.docker("network", "ls", "--filter", named, "--format", "{{.Name}}"))

    def node_exec(self, node: str, *argv: str) -> str:
        """Runs a command in a node of the cluster (kind names its container like it)."""
        return self.engine.docker("exec", node, *argv)

    def _kind(self, *args: str) -> str:
        done = subprocess.run(
            [self.kind, *args],
            capture_output=True,
            text=True,
            env={**os.environ, **self.engine.env},
            timeout=CREATE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise KindError(f"kind {' '.join(args[:2])} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout
