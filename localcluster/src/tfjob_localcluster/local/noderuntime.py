"""The node's containerd, reached from the host with Debian's `ctr`.

Its socket lives in the node's private `/run`; the host reaches it through the node
init's view of the filesystem (`/proc/<pid>/root/...`), so no path of the node is ever
published on the host. Images are imported into the `k8s.io` namespace, where the
kubelet (through CRI) finds them, as `kind load` does.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.images.catalog import ImageStore
from tfjob_localcluster.local.node.config import CONTAINERD_SOCKET
from tfjob_localcluster.waiting import wait_until

NAMESPACE = "k8s.io"


class NodeRuntimeError(LocalClusterError):
    pass


class NodeRuntime:
    def __init__(self, init_pid: int, state_dir: Path) -> None:
        self.address = f"/proc/{init_pid}/root{CONTAINERD_SOCKET}"
        self.record = state_dir / "images.json"

    def ctr(self, *args: str, timeout: float = 600) -> str:
        argv = ["ctr", f"--address={self.address}", f"--namespace={NAMESPACE}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise NodeRuntimeError(
                f"ctr {' '.join(args[:3])}: {(done.stderr or done.stdout).strip()}"
            )
        return done.stdout

    def wait(self, timeout: float) -> None:
        failures: list[str] = []

        def answers() -> bool:
            try:
                self.ctr("version", timeout=5)
            except (NodeRuntimeError, subprocess.TimeoutExpired) as error:
                failures[:] = [str(error)]
                return False
            return True

        wait_until(
            answers,
            timeout,
            lambda: NodeRuntimeError(f"containerd did not answer in {timeout:g}s: {failures[-1]}"),
            interval=0.2,
        )

    def images(self) -> set[str]:
        return set(self.ctr("images", "list", "--quiet").split())

    def load(self, reference: str, tar: Path) -> bool:
        """Imports the image from its tar unless this tar was imported already."""
        done = json.loads(self.record.read_text()) if self.record.exists() else {}
        if done.get(reference) == tar.name and self._has(reference):
            return False
        self.ctr("images", "import", str(tar), timeout=1800)
        done[reference] = tar.name
        self.record.write_text(json.dumps(done, indent=2))
        return True

    def load_all(
        self, store: ImageStore, references: Iterable[str], say: Callable[[str], None]
    ) -> None:
        """Imports images built by `make images` (skips those the node has)."""
        for reference in references:
            started = time.monotonic()
            if self.load(reference, store.tar(reference)):
                say(f"image {reference} imported in {time.monotonic() - started:.1f}s")

    def _has(self, reference: str) -> bool:
        names = self.images()
        return reference in names or f"docker.io/library/{reference}" in names

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        """Signals a container's init process, as `crictl stop` or the OOM killer would."""
        self.ctr("tasks", "kill", "--signal", signal, container_id)
