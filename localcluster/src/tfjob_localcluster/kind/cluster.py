"""A kind cluster running this checkout's images.

`KindCluster.start()` finds a Docker engine (engine.py: the machine's, else the
project's own, installed and started where the machine allows), gets the node image
(nodeimage.py: the published one, else one assembled here), creates the cluster with the
pinned kind, and loads the images built by `make images` from their tars in the cache
with `kind load image-archive` (no copy through the engine: 39 s for the trainer image
here, 65 s with `kind load docker-image`).
`stop()` deletes the cluster and, if this run made it, the `kind` network, and stops the
engine if it is the project's own. Installing the operator is left to the caller
(the Helm chart, as users do).

With `registry` (127.0.0.1:PORT, images/registry.py) the nodes also pull from that registry,
set up as kind's guide to a local registry does it: containerd's `config_path` at
creation, and a hosts.toml for the registry's name in each node; the registry listens on
the host's loopback, which each node reaches at the same address (loopback.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

import tomli_w
import yaml

from tfjob_localcluster.binaries import MissingBinaryError, locate
from tfjob_localcluster.clusters import Cluster
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import packages
from tfjob_localcluster.host.loopback import LoopbackRelay
from tfjob_localcluster.images import engine
from tfjob_localcluster.images.catalog import ImageStore
from tfjob_localcluster.kind import nodeimage
from tfjob_localcluster.local.kubeconfig import write_kubeconfig
from tfjob_localcluster.local.node.files import registry_hosts

CREATE_TIMEOUT = 900
#: The Docker network kind puts its nodes on.
NETWORK = "kind"
#: The label kind puts on every container of a cluster.
CLUSTER_LABEL = "io.x-k8s.kind.cluster"
#: Where a node's containerd reads each registry's hosts.toml (kind's guide's choice).
NODE_REGISTRY_HOSTS = "/etc/containerd/certs.d"


def cluster_config() -> dict[str, Any]:
    """kind's cluster configuration: one node, whose containerd reads registries'
    hosts.toml files from NODE_REGISTRY_HOSTS."""
    patch = {
        "plugins": {"io.containerd.grpc.v1.cri": {"registry": {"config_path": NODE_REGISTRY_HOSTS}}}
    }
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "containerdConfigPatches": [tomli_w.dumps(patch)],
    }


class KindError(LocalClusterError):
    pass


def unavailable() -> str | None:
    """Why a kind cluster cannot be created here, or None."""
    try:
        locate("kind")
    except MissingBinaryError:
        return "kind is not built: run `hack/build-binaries.sh kind`"
    if engine.machines_engine_runs_kind():
        return None
    if os.geteuid() != 0:
        return f"{engine.NO_ENGINE_FOR_KIND}, and starting the project's own needs root"
    if packages.missing(["docker"]) and shutil.which("apt-get") is None:
        return f"{engine.NO_ENGINE_FOR_KIND}, and docker.io cannot be installed (no apt-get)"
    return None


class KindCluster(Cluster):
    """A kind cluster (clusters.py's interface); see the module docstring. `images`: what
    it loads at start."""

    def __init__(
        self,
        workdir: Path,
        images: Iterable[str] = (),
        name: str | None = None,
        say: Callable[[str], None] = print,
        registry: str | None = None,
    ) -> None:
        binaries = locate("kind", "kubectl")
        self.kind = str(binaries.kind)
        self.kubectl = binaries.kubectl
        self.images = tuple(images)
        self.name = name or f"tfjob-{int(time.time())}"
        self.workdir = workdir
        self.kubeconfig = workdir / "kind.kubeconfig"
        self.registry = registry
        self.relays: list[LoopbackRelay] = []
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
        except LocalClusterError as error:
            raise KindError(str(error)) from error
        self.engine_started = True

    def start(self) -> Self:
        """Creates the cluster and loads its images (built by `make images`) into it.
        Raises KindError saying what was missing or failed."""
        started = time.monotonic()
        self.start_engine()
        try:
            self.node_image = nodeimage.ensure(self.engine, self.store, self.say)
        except LocalClusterError as error:
            raise KindError(str(error)) from error
        self.network_existed = self._network_exists()
        self.say(f"creating kind cluster {self.name} from {self.node_image}")
        config = self.workdir / "kind-config.yaml"
        config.write_text(yaml.safe_dump(cluster_config()))
        self._kind(
            "create", "cluster", "--name", self.name, "--image", self.node_image,
            "--config", str(config), "--kubeconfig", str(self.kubeconfig), "--wait", "300s",
        )  # fmt: skip
        if self.registry is not None:
            self._use_registry(self.registry)
        for image in self.images:
            self._kind("load", "image-archive", str(self.store.tar(image)), "--name", self.name)
        self.say(f"kind cluster {self.name} ready in {time.monotonic() - started:.0f}s")
        return self

    def _use_registry(self, address: str) -> None:
        """Each node pulls `address` (127.0.0.1:PORT on the host) under that name."""
        port = int(address.rpartition(":")[2])
        hosts = tomli_w.dumps(registry_hosts(address)).encode()
        for node in self.nodes():
            directory = f"{NODE_REGISTRY_HOSTS}/{address}"
            write = f"mkdir -p {directory} && cat > {directory}/hosts.toml"
            self.engine.docker("exec", "-i", node, "sh", "-c", write, input=hosts)
            pid = self.engine.docker("inspect", "--format", "{{.State.Pid}}", node).strip()
            self.relays.append(LoopbackRelay(Path(f"/proc/{pid}/ns/net"), port).start())
        self.say(f"the nodes pull from the registry on {address}")

    def nodes(self) -> list[str]:
        return self._kind("get", "nodes", "--name", self.name).split()

    def stop(self) -> None:
        """Deletes the cluster; leaves no container, network or engine of the run."""
        for relay in self.relays:
            relay.stop()
        self.relays.clear()
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

    def check(self) -> None:
        """Raises KindError if a node's container has stopped, or the engine has."""
        mine = f"label={CLUSTER_LABEL}={self.name}"
        try:
            running = self.engine.docker(
                "ps", "--filter", mine, "--filter", "status=running", "--format", "{{.Names}}"
            ).split()
            stopped = sorted(set(self.containers()) - set(running))
        except engine.DockerCommandError as error:  # the engine does not answer
            raise KindError(f"kind cluster {self.name}: {error}") from None
        if stopped or not running:
            raise KindError(f"kind cluster {self.name}: nodes not running: {stopped or 'all'}")

    def user_kubeconfig(self, user: str) -> Path:
        """kubeadm's `kubeconfig user` in the control-plane node signs the certificate with
        the cluster's CA; its server is the node's own address, so the credentials go into
        a copy of the admin kubeconfig, which reaches the API server from here."""
        node = f"{self.name}-control-plane"
        signed = yaml.safe_load(
            self.node_exec(node, "kubeadm", "kubeconfig", "user", f"--client-name={user}")
        )
        admin = yaml.safe_load(self.kubeconfig.read_text())
        context = admin["contexts"][0]
        config = {
            **admin,
            "users": [{"name": user, "user": signed["users"][0]["user"]}],
            "contexts": [{"name": user, "context": {**context["context"], "user": user}}],
            "current-context": user,
        }
        return write_kubeconfig(self.workdir / f"user-{user}.kubeconfig", config)

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
