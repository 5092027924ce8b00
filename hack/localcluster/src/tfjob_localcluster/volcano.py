"""Volcano's scheduler beside a local cluster's default scheduler.

vc-scheduler, built from volcano.sh/volcano (VOLCANO_VERSION), places the pods that name it
(`schedulerName: volcano`) a PodGroup at a time, within the capacity of their Queue. The
CRDs it watches (PodGroups, Queues, Numatopologies) are the module's own
(config/crd/volcano/bases); it creates its `default` Queue itself, and runs with its
built-in configuration (actions enqueue, allocate, backfill; the gang, proportion and
predicates plugins among others). Volcano's admission webhooks and controllers are not run:
the operator creates the PodGroups Volcano's job controller would, but nothing sets a
PodGroup's queue when it names none (Volcano's webhook would set `default`), so the tests
name it. It runs as a host process with the admin kubeconfig; it is ready once its log says
it has started to schedule (its health endpoint answers before its caches are synced).
"""

from __future__ import annotations

import time
from pathlib import Path

from tfjob_localcluster import gomodule
from tfjob_localcluster.binaries import locate, read_versions
from tfjob_localcluster.controlplane import free_port
from tfjob_localcluster.kubectl import run_kubectl
from tfjob_localcluster.procs import ManagedProcess

MODULE = "volcano.sh/volcano"
CRDS = Path("config/crd/volcano/bases")
#: The CRDs vc-scheduler watches, by plural and group.
WATCHED = (
    ("podgroups", "scheduling.volcano.sh"),
    ("queues", "scheduling.volcano.sh"),
    ("numatopologies", "nodeinfo.volcano.sh"),
)
STARTED = "Scheduler completes Initialization and start to run"
SCHEDULER_NAME = "volcano"


class VolcanoError(RuntimeError):
    """The scheduler did not start, or its CRDs were refused."""


class Volcano:
    """Volcano's scheduler for a cluster whose API server runs on this host."""

    def __init__(self, kubeconfig: Path, kubectl: Path, state_dir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl
        self.state_dir = state_dir
        self.version = read_versions()["VOLCANO_VERSION"]
        self.binary = locate("vc-scheduler").vc_scheduler
        self.health_port = free_port("127.0.0.1")
        self.metrics_port = free_port("127.0.0.1")
        self.process: ManagedProcess | None = None

    def install_crds(self) -> None:
        module = gomodule.module_dir(MODULE, self.version)
        for plural, group in WATCHED:
            crd = module / CRDS / f"{group}_{plural}.yaml"
            self._kubectl("apply", "--server-side", "-f", str(crd))
        for plural, group in WATCHED:
            self._kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}")

    def start(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        self.install_crds()
        self.process = ManagedProcess(
            "vc-scheduler",
            [
                str(self.binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--scheduler-name={SCHEDULER_NAME}",
                "--leader-elect=false",
                "--schedule-period=500ms",
                f"--healthz-address=127.0.0.1:{self.health_port}",
                f"--listen-address=127.0.0.1:{self.metrics_port}",
                "--cache-dumper=false",
                "--logtostderr",
                "-v=3",
            ],
            self.state_dir / "vc-scheduler.log",
        )
        self.process.start()
        log = self.state_dir / "vc-scheduler.log"
        while STARTED not in log.read_text(errors="replace"):
            if not self.process.running():
                raise VolcanoError(f"vc-scheduler exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise VolcanoError(f"vc-scheduler has not started to schedule:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def log_tail(self, lines: int = 60) -> str:
        return self.process.tail(lines) if self.process else "(not started)"

    def _kubectl(self, *args: str) -> None:
        done = run_kubectl(self.kubectl, self.kubeconfig, *args)
        if done.returncode != 0:
            raise VolcanoError(f"kubectl {' '.join(args)}: {done.stderr}")
