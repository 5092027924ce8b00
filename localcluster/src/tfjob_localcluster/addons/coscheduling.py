"""scheduler-plugins' Coscheduling scheduler beside a local cluster's default scheduler.

A second kube-scheduler, built from sigs.k8s.io/scheduler-plugins (SCHEDULER_PLUGINS_VERSION)
with the Coscheduling plugin, places the pods that name it (`schedulerName:
scheduler-plugins-scheduler`, the name its own manifests deploy it under) a PodGroup at a
time; the default scheduler keeps every other pod. Its PodGroup CRD and its scheduler
configuration are the module's own (manifests/coscheduling). It runs as a host process, like
the control plane, with the admin kubeconfig: its default role does not cover PodGroups.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster import gomodule
from tfjob_localcluster.addons.beside import ProcessBeside
from tfjob_localcluster.binaries import locate, read_versions
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.local.pki import CertificateAuthority, tls_context
from tfjob_operator.apiserver.sync import Rest

MODULE = "sigs.k8s.io/scheduler-plugins"
MANIFESTS = Path("manifests/coscheduling")
SCHEDULER_NAME = "scheduler-plugins-scheduler"
PLUGIN = "Coscheduling"


class CoschedulingError(LocalClusterError):
    """The scheduler did not start, or its CRD was refused."""


def configuration(
    module_config: dict[str, Any], kubeconfig: Path, permit_wait: int
) -> dict[str, Any]:
    """The module's scheduler configuration, run under SCHEDULER_NAME beside the default
    scheduler, with `permit_wait` seconds for a gang's pods to come together."""
    profile = dict(module_config["profiles"][0])
    profile["schedulerName"] = SCHEDULER_NAME
    profile["pluginConfig"] = [
        {"name": PLUGIN, "args": {**args_of(profile), "permitWaitingTimeSeconds": permit_wait}}
    ]
    return {
        **module_config,
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "profiles": [profile],
    }


def args_of(profile: dict[str, Any]) -> dict[str, Any]:
    configs = profile.get("pluginConfig") or []
    return next((dict(c.get("args") or {}) for c in configs if c["name"] == PLUGIN), {})


class Coscheduling(ProcessBeside):
    """The Coscheduling scheduler for a cluster whose API server runs on this host."""

    error = CoschedulingError

    def __init__(
        self,
        kubeconfig: Path,
        kubectl: Path,
        ca: CertificateAuthority,
        state_dir: Path,
        permit_wait: int = 10,
    ) -> None:
        super().__init__(SCHEDULER_NAME, kubeconfig, kubectl, state_dir)
        self.ca = ca
        self.permit_wait = permit_wait
        self.version = read_versions()["SCHEDULER_PLUGINS_VERSION"]
        self.binary = locate("scheduler").scheduler_plugins
        self.port = free_port("127.0.0.1")

    def start(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        module = gomodule.module_dir(MODULE, self.version)
        self.kubectl("apply", "--server-side", "-f", str(module / MANIFESTS / "crd.yaml"))
        self.kubectl("wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io")
        module_config = yaml.safe_load((module / MANIFESTS / "scheduler-config.yaml").read_text())
        config = self.state_dir / "scheduler-config.yaml"
        config.write_text(
            yaml.safe_dump(configuration(module_config, self.kubeconfig, self.permit_wait))
        )
        serving = self.ca.issue(
            self.state_dir / "serving.crt",
            SCHEDULER_NAME,
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        probe = Rest.at(f"https://127.0.0.1:{self.port}", tls_context(self.ca.pair.cert))
        self.launch(
            [
                str(self.binary),
                f"--config={config}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                "--profiling=false",
            ],
            lambda: probe.ok("/healthz"),
            deadline,
        )
