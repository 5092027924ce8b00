"""Files generated from one source stay in sync with it: the CRDs (from the pinned
Kubernetes' OpenAPI document, fetched with `go mod download`), the kustomize install (from
the Helm chart, rendered by helm), the examples (from `tfjob-operator new`), the Grafana
dashboard (from its panels) and the chart's README (from its values). What the committed
CRDs must hold is checked without Go in tests/unit/operator/test_crd_generation.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.checkout import ROOT


@pytest.mark.parametrize(
    "generator",
    [
        "hack.gen_crd",
        "hack.gen_manifests",
        "hack.gen_examples",
        "hack.gen_dashboard",
        "hack.gen_chart_readme",
    ],
)
def test_generated_files_are_up_to_date(generator: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", generator, "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{generator} --check: {done.stderr}"
