"""An OCI registry on the host's loopback: CNCF Distribution's `registry`, built from its
Go module (hack/build-binaries.sh registry).

No public registry is reachable here, so the release is pushed to this one and the
clusters pull from it, as they would from ghcr.io (`make release REGISTRY=127.0.0.1:PORT`,
then `helm install oci://127.0.0.1:PORT/charts/tfjob-operator`). It listens on
127.0.0.1 only, over plain HTTP (which containerd, helm and buildah accept for a loopback
address when told so), keeps its blobs under its state directory and runs until
stopped; a node reaches it at the same address through loopback.py.

    with OciRegistry(state_dir) as registry:
        print(registry.address)        # 127.0.0.1:PORT
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.binaries import locate
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.host.procs import ManagedProcess, Started

HOST = "127.0.0.1"
START_TIMEOUT = 30.0


class OciRegistryError(LocalClusterError):
    pass


def registry_config(storage: Path, address: str) -> dict[str, Any]:
    """Distribution's configuration: filesystem storage, and no access log (every blob
    request would be a line)."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}},
        "http": {"addr": address},
    }


class OciRegistry(Started):
    def __init__(
        self, state_dir: Path, port: int | None = None, say: Callable[[str], None] = print
    ) -> None:
        self.state_dir = state_dir
        self.port = port or free_port(HOST)
        self.say = say
        self.process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        """host:port, the registry part of the images' and the chart's names."""
        return f"{HOST}:{self.port}"

    def start(self) -> OciRegistry:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "config.yml"
        config.write_text(yaml.safe_dump(registry_config(self.state_dir / "data", self.address)))
        binary = locate("registry").registry
        self.process = ManagedProcess(
            "registry", [str(binary), "serve", str(config)], self.state_dir / "registry.log"
        )
        self.process.start()
        try:
            self.process.wait_ready(
                self.answers, START_TIMEOUT, OciRegistryError, what=f"{self.address}/v2/"
            )
        except OciRegistryError:
            self.stop()
            raise
        self.say(f"OCI registry on {self.address} (blobs in {self.state_dir / 'data'})")
        return self

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=10)
            self.process = None
