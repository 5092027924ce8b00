"""A process run beside a local cluster (Kueue, a gang scheduler): a host process with the
admin kubeconfig, whose CRDs go in with kubectl, waited for until it is ready."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from tfjob_localcluster.addons.kubectl import run_kubectl
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.procs import ManagedProcess


class ProcessBeside:
    """Starts, waits for and stops one process; its log is `<name>.log` in `state_dir`."""

    #: Raised when the process does not start or kubectl fails.
    error: ClassVar[type[LocalClusterError]] = LocalClusterError

    def __init__(self, name: str, kubeconfig: Path, kubectl: Path, state_dir: Path) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self.state_dir = state_dir
        self.log_path = state_dir / f"{name}.log"
        self.process: ManagedProcess | None = None

    def launch(
        self,
        argv: Sequence[str],
        ready: Callable[[], bool],
        deadline: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Starts the process, with `env` added to this one's environment; returns once
        `ready()`, raises if it exits or time runs out."""
        environment = {**os.environ, **env} if env else None
        self.process = ManagedProcess(self.name, list(argv), self.log_path, environment)
        self.process.start()
        self.process.wait_ready(ready, deadline - time.monotonic(), self.error, interval=0.5)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def log_tail(self, lines: int = 60) -> str:
        return self.process.tail(lines) if self.process else "(not started)"

    def kubectl(self, *args: str, input: str | None = None) -> None:
        done = run_kubectl(self.kubectl_path, self.kubeconfig, *args, input=input)
        if done.returncode != 0:
            raise self.error(f"kubectl {' '.join(args)}: {done.stderr}")
