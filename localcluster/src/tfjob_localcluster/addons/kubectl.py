"""kubectl against a local cluster, for the components that run beside it (Kueue, the gang
schedulers): their CRDs and configuration go in as their own projects ship them."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_kubectl(
    kubectl: Path, kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs kubectl; the caller reads the return code (at most two minutes)."""
    return subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
