"""Volcano's scheduler beside a local cluster's default scheduler.

vc-scheduler, built from volcano.sh/volcano (VOLCANO_VERSION), places the pods that name it
(`schedulerName: volcano`) a PodGroup at a time, within the capacity of their Queue. The
CRDs it watches (PodGroups, Queues, Numatopologies) are the module's own
(config/crd/volcano/bases); it creates its `default` Queue itself, and runs with its
built-in configuration (actions enqueue, allocate, backfill; the gang, proportion and
predicates plugins among others). Volcano's admission webhooks and controllers are not run:
the operator creates the PodGroups Volcano's job controller would, and names the `default`
Queue in those whose job names none, as Volcano's webhook would. It runs as a host process
with the admin kubeconfig; it is ready once its log says it has started to schedule (its
health endpoint answers before its caches are synced).
"""

from __future__ import annotations

import time
from pathlib import Path

from tfjob_localcluster import gomodule
from tfjob_localcluster.addons.beside import ProcessBeside
from tfjob_localcluster.binaries import locate, read_versions
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.ports import free_port

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


class VolcanoError(LocalClusterError):
    """The scheduler did not start, or its CRDs were refused."""


class Volcano(ProcessBeside):
    """Volcano's scheduler for a cluster whose API server runs on this host."""

    error = VolcanoError

    def __init__(self, kubeconfig: Path, kubectl: Path, state_dir: Path) -> None:
        super().__init__("vc-scheduler", kubeconfig, kubectl, state_dir)
        self.version = read_versions()["VOLCANO_VERSION"]
        self.binary = locate("vc-scheduler").vc_scheduler
        self.health_port = free_port("127.0.0.1")
        self.metrics_port = free_port("127.0.0.1")

    def install_crds(self) -> None:
        module = gomodule.module_dir(MODULE, self.version)
        for plural, group in WATCHED:
            self.kubectl(
                "apply", "--server-side", "-f", str(module / CRDS / f"{group}_{plural}.yaml")
            )
        for plural, group in WATCHED:
            self.kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}")

    def start(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        self.install_crds()
        self.launch(
            [
                str(self.binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--scheduler-name={SCHEDULER_NAME}",
                "--leader-elect=false",
                "--schedule-period=500ms",
                # Ports of its own: the defaults (:11251, :8080) may be taken.
                f"--healthz-address=127.0.0.1:{self.health_port}",
                f"--listen-address=127.0.0.1:{self.metrics_port}",
                "--cache-dumper=false",
                "--logtostderr",
                "-v=3",
            ],
            lambda: STARTED in self.log_path.read_text(errors="replace"),
            deadline,
            # Its socket for changing the log level at run time, else in the host's /tmp.
            env={"DEBUG_SOCKET_DIR": str(self.state_dir)},
        )
