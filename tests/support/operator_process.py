"""The operator from this checkout, run as a separate process as it runs in a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from support.waiting import wait_until
from tfjob_localcluster.controlplane import free_port


class OperatorProcess:
    """`tfjob-operator run` against a kubeconfig, its output kept in `log_path`."""

    def __init__(self, kubeconfig: str, log_path: Path, *extra_args: str) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_args = extra_args
        self.health_port = free_port("127.0.0.1")
        self.metrics_port = free_port("127.0.0.1")
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n===== operator start #{self.starts} =====\n".encode())
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tfjob_operator.cli",
                    "run",
                    "--kubeconfig",
                    self.kubeconfig,
                    "--health-port",
                    str(self.health_port),
                    "--metrics-port",
                    str(self.metrics_port),
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            self._alive_and_healthy,
            timeout,
            lambda _: f"the operator to be healthy:\n{self.log_tail()}",
            interval=0.2,
        )

    def _alive_and_healthy(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the operator exited early:\n{self.log_tail()}")
        return self._healthy()

    def kill(self) -> None:
        """SIGKILL: the operator gets no chance to finish anything."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM, grace=15)

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def log_tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def _signal(self, signum: int, grace: float = 10) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signum)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
