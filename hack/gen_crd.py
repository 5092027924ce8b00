#!/usr/bin/env python3
"""Generate the TFJob CRDs (tfjobs.tfjob.dev, tfjobs.kubeflow.org) and their kustomize copies.

    .venv/bin/python hack/gen_crd.py            write both files
    .venv/bin/python hack/gen_crd.py --check    exit 1 if the committed files differ

The pod template schema is the PodTemplateSpec of the Kubernetes API server's OpenAPI v3
document (api/v1). By default it is read from the k8s.io/kubernetes module of the pinned
version (hack/versions.env) in the Go module cache, downloaded by `go mod download` if absent.
`--openapi` reads it from a file, a URL or stdin instead, e.g. from a running API server:

    kubectl get --raw /openapi/v3/api/v1 | .venv/bin/python hack/gen_crd.py --openapi -
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tfjob_operator.api import KUBEFLOW, TFJOB_DEV, TFJobApi
from tfjob_operator.crd.render import applied_json_size, render_crd
from tfjob_operator.crd.schema import tfjob_crd
from tfjob_operator.crd.structural import SchemaError, StructuralConverter

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "tfjob-operator"
# Where each CRD goes: the chart (crds/ is always installed; files/ is installed by a template
# with kubeflow.enabled), then an identical copy for kustomize, which cannot load files
# outside its root.
OUTPUTS: dict[TFJobApi, tuple[Path, ...]] = {
    TFJOB_DEV: (
        CHART / "crds" / f"{TFJOB_DEV.crd_name}.yaml",
        REPO / "manifests" / "base" / "crd" / f"{TFJOB_DEV.crd_name}.yaml",
    ),
    KUBEFLOW: (
        CHART / "files" / f"{KUBEFLOW.crd_name}.yaml",
        REPO / "manifests" / "overlays" / "kubeflow" / "crd" / f"{KUBEFLOW.crd_name}.yaml",
    ),
}
VERSIONS_ENV = REPO / "hack" / "versions.env"
OPENAPI_IN_MODULE = Path("api/openapi-spec/v3/api__v1_openapi.json")
POD_TEMPLATE_SPEC = "io.k8s.api.core.v1.PodTemplateSpec"
# kubectl apply keeps the whole object in one annotation; annotations are limited to 256 KiB.
APPLY_ANNOTATION_LIMIT = 256 * 1024


def pinned_kubernetes_version() -> str:
    for line in VERSIONS_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "KUBERNETES_VERSION":
            return value.strip()
    raise SystemExit(f"gen_crd: KUBERNETES_VERSION is not set in {VERSIONS_ENV}")


def go_module_cache() -> Path:
    """Where `go` keeps modules, without running it: GOMODCACHE, else GOPATH's pkg/mod."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    gopath = os.environ.get("GOPATH", "").split(os.pathsep)[0] or str(Path.home() / "go")
    return Path(gopath) / "pkg" / "mod"


def module_openapi_path(version: str) -> Path:
    """The api/v1 OpenAPI document inside k8s.io/kubernetes@version, downloaded if absent."""
    cached = go_module_cache() / f"k8s.io/kubernetes@{version}" / OPENAPI_IN_MODULE
    if cached.is_file():
        return cached
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    # Outside any go.mod, so that no module of the work tree is consulted.
    with tempfile.TemporaryDirectory() as scratch:
        try:
            result = subprocess.run(
                ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
        except FileNotFoundError as error:
            raise SystemExit("gen_crd: `go` is not on PATH; pass --openapi FILE|URL") from error
    if result.returncode != 0:
        raise SystemExit(
            f"gen_crd: go mod download k8s.io/kubernetes@{version} failed:\n"
            f"{result.stdout}{result.stderr}"
        )
    path = Path(json.loads(result.stdout)["Dir"]) / OPENAPI_IN_MODULE
    if not path.is_file():
        raise SystemExit(f"gen_crd: {path} does not exist")
    return path


def read_openapi(source: str) -> dict[str, Any]:
    if source == "-":
        text = sys.stdin.read()
    elif source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=60) as response:
            text = response.read().decode()
    else:
        text = Path(source).read_text()
    document = json.loads(text)
    if not isinstance(document, dict):
        raise SystemExit(f"gen_crd: {source} is not an OpenAPI document")
    return document


def generate(
    document: dict[str, Any], source_label: str, api: TFJobApi
) -> tuple[str, dict[str, Any]]:
    """The CRD of `api` as YAML text and as data, from an api/v1 OpenAPI v3 document."""
    try:
        pod_template = StructuralConverter(document).component(POD_TEMPLATE_SPEC)
    except SchemaError as error:
        raise SystemExit(f"gen_crd: {error}") from error
    crd = tfjob_crd(pod_template, api)
    header = (
        f"Generated by hack/gen_crd.py: do not edit. {_shown(OUTPUTS[api][1])} holds an "
        "identical copy.\n"
        f"Pod template schema from {source_label}.\n"
        "Regenerate: .venv/bin/python hack/gen_crd.py (verify: --check)"
    )
    return render_crd(crd, header), crd


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def check(expected: str, paths: tuple[Path, ...]) -> int:
    """0 if every file holds `expected`; else 1, with a diff summary on stderr."""
    stale = 0
    for path in paths:
        current = path.read_text() if path.is_file() else ""
        if current == expected:
            continue
        stale += 1
        diff = list(
            difflib.unified_diff(
                current.splitlines(),
                expected.splitlines(),
                f"{_shown(path)} (committed)",
                f"{_shown(path)} (generated)",
                lineterm="",
            )
        )
        changed = sum(1 for line in diff if line[:1] in "+-") - 2
        print(f"{_shown(path)}: out of date ({changed} lines differ)", file=sys.stderr)
        for line in diff[:40]:
            print(f"  {line}", file=sys.stderr)
        if len(diff) > 40:
            print(f"  ... {len(diff) - 40} more diff lines", file=sys.stderr)
    if stale:
        print("gen_crd: run `.venv/bin/python hack/gen_crd.py` to regenerate", file=sys.stderr)
        return 1
    print(f"gen_crd: {', '.join(_shown(p) for p in paths)} up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--openapi",
        metavar="FILE|URL|-",
        help="api/v1 OpenAPI v3 document (default: the pinned k8s.io/kubernetes module's)",
    )
    parser.add_argument(
        "--check", action="store_true", help="compare the committed files, write nothing"
    )
    args = parser.parse_args(argv)

    if args.openapi:
        shown = "stdin" if args.openapi == "-" else args.openapi
        source, label = args.openapi, f"the OpenAPI v3 document read from {shown}"
    else:
        version = pinned_kubernetes_version()
        source = str(module_openapi_path(version))
        label = f"k8s.io/kubernetes@{version} {OPENAPI_IN_MODULE}"
    document = read_openapi(source)
    status = 0
    for api, paths in OUTPUTS.items():
        text, crd = generate(document, label, api)
        if args.check:
            status |= check(text, paths)
            continue
        json_size = applied_json_size(crd)
        if json_size >= APPLY_ANNOTATION_LIMIT:
            raise SystemExit(
                f"gen_crd: the CRD is {json_size} bytes as JSON; kubectl apply cannot store "
                f"more than {APPLY_ANNOTATION_LIMIT} in its last-applied annotation"
            )
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {_shown(path)}")
        print(f"gen_crd: {len(text.encode())} bytes YAML, {json_size} bytes as compact JSON")
    return status


if __name__ == "__main__":
    sys.exit(main())
