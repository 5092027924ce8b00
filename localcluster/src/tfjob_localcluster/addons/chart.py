"""Installs the operator with the repository's Helm chart, as users do, and waits for it.

The wait is ours, not `helm --wait`: it watches the operator's pod and fails as soon as
the pod cannot get further (CrashLoopBackOff, an image the node does not have, ...) or
stops making progress, with a diagnosis (diagnose.py) instead of a timeout minutes later.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster import diagnose
from tfjob_localcluster.binaries import cache_root, locate
from tfjob_localcluster.checkout import CHART
from tfjob_localcluster.errors import LocalClusterError
from tfjob_localcluster.images.catalog import REGISTRY
from tfjob_operator.apiserver.sync import Rest

RELEASE = "tfjob-operator"
NAMESPACE = "tfjob-system"
SELECTOR = f"app.kubernetes.io/name=tfjob-operator,app.kubernetes.io/instance={RELEASE}"


class InstallError(LocalClusterError):
    pass


def default_values() -> dict[str, Any]:
    """The chart's values.yaml."""
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def helm_environment() -> dict[str, str]:
    """helm's cache, configuration and data (an OCI chart's pulls, a registry's login)
    go to the project's cache, not ~/.cache/helm, ~/.config/helm, ~/.local/share/helm.
    A login the caller made for the release (`REGISTRY_AUTH_FILE`) is helm's too."""
    home = cache_root() / "helm"
    environment = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if auth := os.environ.get("REGISTRY_AUTH_FILE"):
        environment["HELM_REGISTRY_CONFIG"] = auth
    return environment


def run_helm(kubeconfig: Path | str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The pinned helm against `kubeconfig` (None: no cluster); the caller checks the
    outcome."""
    cluster = [] if kubeconfig is None else [f"--kubeconfig={kubeconfig}"]
    return subprocess.run(
        [str(locate("helm").helm), *cluster, *args],
        capture_output=True,
        text=True,
        env=helm_environment(),
        timeout=600,
        check=False,
    )


def helm(kubeconfig: Path | str | None, *args: str) -> str:
    """The pinned helm's output; raises with its output when it fails."""
    done = run_helm(kubeconfig, *args)
    if done.returncode != 0:
        raise InstallError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def install_operator(
    kubeconfig: Path | str,
    namespace: str = NAMESPACE,
    values: Sequence[str] = (),
    timeout: float = 300,
    say: Callable[[str], None] = lambda _message: None,
) -> None:
    """Installs, or upgrades to, this checkout's operator, and waits until it is available.

    Helm installs a chart's CRDs on the first install only, so the CRD is applied first:
    a cluster kept from an earlier run gets the current one too.
    """
    kubectl = str(locate("kubectl").kubectl)
    applied = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "--force-conflicts",
         "-f", str(CHART / "crds")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if applied.returncode != 0:
        raise InstallError(f"applying the CRD failed:\n{applied.stderr}")
    # The operator's image as `make images` named it (the node has it: nothing is pulled).
    values = [f"image.registry={REGISTRY}", *values]
    settings = [part for value in values for part in ("--set", value)]
    helm(
        kubeconfig, "upgrade", "--install", RELEASE, str(CHART), "--namespace", namespace,
        "--create-namespace", *settings,
    )  # fmt: skip
    say("helm upgrade --install done; waiting for the operator's pod")
    wait_available(kubeconfig, namespace, timeout)


def operator_stuck(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Why one of the operator's pods cannot run (CrashLoopBackOff, ...), if one cannot."""
    for pod in pods:
        reason = diagnose.stuck(pod)
        if reason is not None:
            return f"{pod['metadata']['name']}: {reason}"
    return None


def operator_pods(rest: Rest, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The pods of the chart's operator in `namespace`."""
    listed = rest.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": SELECTOR})
    pods: list[dict[str, Any]] = listed.get("items") or []
    return pods


def wait_available(kubeconfig: str | Path, namespace: str, timeout: float) -> None:
    """Until the chart's Deployment has rolled out in `namespace`; fails at once, with a
    diagnosis, when its pod cannot get further or stops making progress."""
    rest = Rest.of_kubeconfig(kubeconfig)
    watch = diagnose.StallWatch()
    deadline = time.monotonic() + timeout

    def diagnosis() -> str:
        return diagnose.describe_pods(rest, namespace, SELECTOR)

    while True:
        deployment = rest.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{RELEASE}")
        status, wanted = deployment.get("status") or {}, deployment["spec"]["replicas"]
        if (
            status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == wanted
            and status.get("availableReplicas") == wanted
            and not status.get("unavailableReplicas")
        ):
            return
        pods = operator_pods(rest, namespace)
        reason = operator_stuck(pods)
        if reason is not None:
            raise InstallError(f"the operator cannot start ({reason}):\n{diagnosis()}")
        watch.observe(
            sorted(
                (
                    p["metadata"]["name"],
                    (p.get("status") or {}).get("phase"),
                    str((p.get("status") or {}).get("containerStatuses")),
                )
                for p in pods
            )
        )
        watch.check("the operator's rollout", diagnosis)
        if time.monotonic() > deadline:
            raise InstallError(f"the operator was not available in {timeout:g}s:\n{diagnosis()}")
        time.sleep(1)
