"""Installs the operator with the repository's Helm chart, as users do."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tfjob_localcluster.binaries import locate

CHART = Path(__file__).resolve().parents[4] / "charts" / "tfjob-operator"
RELEASE = "tfjob-operator"


def run_helm(kubeconfig: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """The pinned helm against `kubeconfig`; the caller checks the outcome."""
    return subprocess.run(
        [str(locate("helm").helm), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def helm(kubeconfig: Path | str, *args: str) -> str:
    """The pinned helm's output; raises with its output when it fails."""
    done = run_helm(kubeconfig, *args)
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def install_operator(
    kubeconfig: Path | str, namespace: str = "tfjob-system", values: Sequence[str] = ()
) -> str:
    """Installs, or upgrades to, this checkout's operator, and waits until it is available.

    Helm installs a chart's CRDs on the first install only, so the CRD is applied first:
    a cluster kept from an earlier run gets the current one too.
    """
    kubectl = str(locate("kubectl").kubectl)
    subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "--force-conflicts",
         "-f", str(CHART / "crds")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    settings = [part for value in values for part in ("--set", value)]
    return helm(
        kubeconfig, "upgrade", "--install", RELEASE, str(CHART), "--namespace", namespace,
        "--create-namespace", "--wait", "--timeout=300s", *settings,
    )  # fmt: skip
