"""Kueue beside a local cluster: the real manager, built from its Go module, admitting jobs.

Kueue runs as a host process, like the control plane, from the binary hack/build-binaries.sh
builds (KUEUE_VERSION). What Kueue's manifests deploy in a cluster comes from the same
module: its CRDs (config/components/crd/bases) and its webhooks
(config/components/webhook/manifests.yaml), and the conversion webhooks its kustomization
patches into some CRDs (their objects are stored as v1beta1 and served as v1beta2 too).
Kueue runs as its default configuration has it since v0.17, its Kubeflow integration off:
both APIs' TFJobs are external frameworks, whose Workloads the operator makes; or, for the
tests of clusters that keep it on, with `kubeflow.org/tfjob` among its integrations (then
Kueue makes the Workloads of kubeflow.org's TFJobs). Kueue refuses a configuration naming a
job type both ways. The webhooks kept are those of Kueue's own objects and of Kubeflow's TFJob,
as its manifests install them whether the integration is on or not (off, Kueue answers them
with a no-op); they call the process at https://127.0.0.1:<port> with a certificate of the
cluster's CA, since no Service fronts it.
So Kueue's own certificate management, which expects that Service, is off, and so is its
visibility API server, which nothing here registers.
A MultiKueue manager (`multikueue=MultiKueueManager(...)`) dispatches both APIs' TFJobs
with Kueue's generic adapter for external frameworks (its alpha feature gate
MultiKueueAdaptersForCustomJobs), and gives up a lost worker after `worker_lost_timeout`
(Kueue's default is 15 minutes). `multikueue_secret` is the Secret a MultiKueueCluster
reads a worker's kubeconfig from: Kueue accepts only one that carries its certificates.
Without its certificate management,
Kueue reads a metrics certificate from /etc/kueue/metrics/certs even when it serves no
metrics: it runs in a mount namespace of its own (private_run.py) whose /etc is an
overlay holding that file, so nothing is written to the host's /etc.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster import gomodule
from tfjob_localcluster.addons.beside import ProcessBeside
from tfjob_localcluster.addons.kubectl import run_kubectl
from tfjob_localcluster.binaries import locate, read_versions
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.host import private_run
from tfjob_localcluster.host.ports import free_port
from tfjob_localcluster.local.pki import CertificateAuthority
from tfjob_localcluster.waiting import wait_until

MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
#: Kueue's name for its Kubeflow TFJob integration, and the resources its webhooks see.
KUBEFLOW_INTEGRATION = "kubeflow.org/tfjob"
#: The integration Kueue enables when it is given none (and its default configuration's
#: first): named, so that the list is never empty.
BATCH_JOB_INTEGRATION = "batch/job"
WEBHOOK_RESOURCES = ("tfjobs",)
#: Jobs whose own controller is Kueue's job controller for them: TFJobs, whose Workloads
#: the operator makes (operator/src/tfjob_operator/integrations/kueue.py).
TFJOB_DEV_FRAMEWORK = "TFJob.v1.tfjob.dev"
KUBEFLOW_FRAMEWORK = "TFJob.v1.kubeflow.org"
KUEUE_GROUP = "kueue.x-k8s.io"
WEBHOOK_MANIFESTS = Path("config/components/webhook/manifests.yaml")
#: Where Kueue reads its metrics certificate when its certificate management is off.
METRICS_CERTS = Path("kueue/metrics/certs")
CRDS = Path("config/components/crd")

Obj = dict[str, Any]


class KueueError(LocalClusterError):
    """Kueue did not start, or its webhooks did not answer."""


#: What MultiKueue needs of Kueue beyond its defaults: its generic adapter (alpha).
MULTIKUEUE_FEATURE_GATES = ("MultiKueueAdaptersForCustomJobs=true",)
#: The Secret key a MultiKueueCluster's kubeconfig is read from (Kueue's).
MULTIKUEUE_KUBECONFIG_KEY = "kubeconfig"


@dataclass(frozen=True)
class MultiKueueManager:
    """Kueue as a MultiKueue manager: how long a worker may be unreachable before the
    jobs it admitted are dispatched again."""

    worker_lost_timeout: str = "15m"


def multikueue_configuration(manager: MultiKueueManager) -> Obj:
    """The Configuration's `multiKueue`: both APIs' TFJobs through the generic adapter."""
    return {
        "externalFrameworks": [{"name": TFJOB_DEV_FRAMEWORK}, {"name": KUBEFLOW_FRAMEWORK}],
        "workerLostTimeout": manager.worker_lost_timeout,
    }


def multikueue_secret(name: str, kubeconfig: str) -> Obj:
    """The Secret, in Kueue's namespace, a MultiKueueCluster named `name` reads its
    worker's `kubeconfig` (certificates embedded) from."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": {MULTIKUEUE_KUBECONFIG_KEY: kubeconfig},
    }


def configuration(
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    kubeflow_integration: bool,
    multikueue: MultiKueueManager | None = None,
) -> Obj:
    """Kueue's Configuration; `kubeflow_integration` puts kubeflow.org's TFJobs under
    Kueue's own integration instead of the operator's route."""
    return {
        **({"multiKueue": multikueue_configuration(multikueue)} if multikueue else {}),
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {
            "frameworks": [BATCH_JOB_INTEGRATION]
            + ([KUBEFLOW_INTEGRATION] if kubeflow_integration else []),
            "externalFrameworks": [TFJOB_DEV_FRAMEWORK]
            + ([] if kubeflow_integration else [KUBEFLOW_FRAMEWORK]),
        },
    }


def webhook_configurations(
    manifests: Sequence[Obj], url: str, ca_bundle: bytes, resources: Sequence[str]
) -> list[Obj]:
    """Kueue's webhook configurations, kept to its own objects and `resources`, calling
    `url` + each webhook's path instead of a Service."""
    out = []
    for manifest in manifests:
        kept = []
        for webhook in manifest.get("webhooks") or []:
            rules = webhook.get("rules") or []
            ours = any(KUEUE_GROUP in r.get("apiGroups", []) for r in rules) or any(
                resource in r.get("resources", []) for r in rules for resource in resources
            )
            if not ours:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            kept.append(
                {
                    **webhook,
                    "clientConfig": {
                        "url": f"{url}{path}",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                }
            )
        metadata = {"name": f"kueue-{manifest['metadata']['name']}"}
        out.append({**manifest, "metadata": metadata, "webhooks": kept})
    return out


def crds(directory: Path, url: str, ca_bundle: bytes) -> list[Obj]:
    """Kueue's CRDs as its kustomization in `directory` lists them, with the conversion
    webhooks it patches in calling `url`/convert."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out = [yaml.safe_load((directory / path).read_text()) for path in kustomization["resources"]]
    converted = {
        yaml.safe_load((directory / patch["path"]).read_text())["metadata"]["name"]
        for patch in kustomization.get("patches") or []
        if "webhook_in_" in patch["path"]
    }
    for crd in out:
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "url": f"{url}/convert",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
    return out


class Kueue(ProcessBeside):
    """Kueue for a cluster whose API server runs on this host (see the module docstring)."""

    error = KueueError

    def __init__(
        self,
        kubeconfig: Path,
        kubectl: Path,
        ca: CertificateAuthority,
        state_dir: Path,
        *,
        kubeflow_integration: bool = False,
        multikueue: MultiKueueManager | None = None,
    ) -> None:
        super().__init__("kueue", kubeconfig, kubectl, state_dir)
        self.ca = ca
        self.kubeflow_integration = kubeflow_integration
        self.multikueue = multikueue
        self.version = read_versions()["KUEUE_VERSION"]
        self.binary = locate("kueue").kueue
        self.webhook_port = free_port("127.0.0.1")
        self.health_port = free_port("127.0.0.1")
        self.webhooks: list[Obj] = []

    def start(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        module = gomodule.module_dir(MODULE, self.version)
        url = f"https://127.0.0.1:{self.webhook_port}"
        ca_bundle = self.ca.pair.cert.read_bytes()
        definitions = crds(module / CRDS, url, ca_bundle)
        for crd in definitions:
            self._apply(crd)
        # Kueue sets up its indexes at start and exits if a kind is not served yet, which
        # on a loaded API server can be seconds after the apply.
        names = [f"crd/{crd['metadata']['name']}" for crd in definitions]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self._apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        cert_dir = self.state_dir / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        pair = self.ca.issue(
            cert_dir / "tls.crt", "kueue-webhook", ip_addresses=("127.0.0.1",), server=True
        )
        assert pair.key == cert_dir / "tls.key"
        etc_upper = self.state_dir / "etc"
        shutil.copytree(cert_dir, etc_upper / METRICS_CERTS, dirs_exist_ok=True)
        config = self.state_dir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                configuration(
                    self.webhook_port,
                    self.health_port,
                    cert_dir,
                    self.kubeflow_integration,
                    self.multikueue,
                )
            )
        )
        self.launch(
            private_run.command(
                [
                    str(self.binary),
                    f"--config={config}",
                    f"--kubeconfig={self.kubeconfig}",
                    "--feature-gates="
                    + ",".join(
                        ("VisibilityOnDemand=false",)
                        + (MULTIKUEUE_FEATURE_GATES if self.multikueue else ())
                    ),
                ],
                etc_upper,
            ),
            self._ready,
            deadline,
        )
        manifests = [m for m in yaml.safe_load_all((module / WEBHOOK_MANIFESTS).read_text()) if m]
        self.webhooks = webhook_configurations(manifests, url, ca_bundle, WEBHOOK_RESOURCES)
        for webhook in self.webhooks:
            self._apply(webhook)
        self._wait_webhooks(deadline)

    def stop(self) -> None:
        """Removes the webhooks first: the API server must not call a Kueue that is gone."""
        for webhook in self.webhooks:
            kind = webhook["kind"].lower()
            self.kubectl("delete", kind, webhook["metadata"]["name"], "--ignore-not-found")
        self.webhooks = []
        super().stop()

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _wait_webhooks(self, deadline: float) -> None:
        """Until the API server reaches Kueue's webhooks: a server-side dry run of a
        ResourceFlavor passes through them."""
        probe = {
            "apiVersion": f"{KUEUE_GROUP}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "webhook-probe"},
        }
        refusals: list[str] = []

        def answer() -> bool:
            done = run_kubectl(
                self.kubectl_path,
                self.kubeconfig,
                *("create", "--dry-run=server", "-f", "-"),
                input=json.dumps(probe),
            )
            refusals[:] = [done.stderr]
            return done.returncode == 0

        wait_until(
            answer,
            deadline - time.monotonic(),
            lambda: KueueError(
                f"Kueue's webhooks do not answer: {refusals[-1]}\n{self.log_tail()}"
            ),
            interval=0.5,
        )

    def _apply(self, obj: Obj) -> None:
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(obj)
        )
