"""The Helm chart's objects as plain manifests, for `kubectl apply`.

The chart is the one source of the operator's Deployment, RBAC and Service: the
kustomize install in manifests/ (hack/gen_manifests.py) and a release's install.yaml
are both rendered from it here, relabelled as managed by the tool that applies them
rather than by a Helm release.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tfjob_localcluster.addons.chart import NAMESPACE, RELEASE, helm

CRD = "CustomResourceDefinition"


def render_chart(
    chart: Path | str, values: Sequence[str] = (), *, crds: bool, managed_by: str
) -> list[dict[str, Any]]:
    """The objects of `chart` (a directory or a packaged .tgz) with `values` set, in
    namespace tfjob-system; its crds/ too if `crds`."""
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    args.append("--include-crds" if crds else "--skip-crds")
    for value in values:
        args += ["--set", value]
    objects = [doc for doc in yaml.safe_load_all(helm(None, *args)) if doc]
    for obj in objects:
        labels = obj["metadata"].get("labels")
        if labels is None:
            continue
        labels.pop("helm.sh/chart", None)
        if "app.kubernetes.io/managed-by" in labels:
            labels["app.kubernetes.io/managed-by"] = managed_by
    return objects


def namespace(name: str = NAMESPACE) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def dump(objects: Sequence[dict[str, Any]], header: str) -> str:
    return header + yaml.safe_dump_all(objects, sort_keys=False)


def install(chart: Path | str, values: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Everything an install applies, in order: the namespace, the CRDs, the operator."""
    objects = render_chart(chart, values, crds=True, managed_by="kubectl")
    crds = [o for o in objects if o["kind"] == CRD]
    return [namespace(), *crds, *(o for o in objects if o["kind"] != CRD)]
