"""Every pod the project creates or ships passes Pod Security "restricted", as the API
server's own PodSecurity admission judges it: the pods the operator renders from every
example and from what `tfjob-operator new` writes, the TensorBoard it runs beside a job,
and the operator's own pod as the chart renders it. Each is created with a server-side dry
run in a namespace that enforces "restricted" (admission runs, nothing is stored); a pod
that asks for nothing is refused there, so the namespace does enforce.

The e2e tests run a job and its TensorBoard in such a namespace for real
(tests/e2e/test_restricted_namespace.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from support.checkout import ROOT
from support.cluster import create_namespace, delete_namespace

from tfjob_localcluster.addons.chart import RELEASE, run_helm
from tfjob_localcluster.checkout import CHART
from tfjob_operator import scaffold
from tfjob_operator.api import JobRef
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.integrations.tensorboard import board_spec, render_board
from tfjob_operator.job_view import JobView
from tfjob_operator.render import render_pod
from tfjob_operator.spec import Replica, parse_spec

JOB_UID = "00000000-0000-0000-0000-000000000001"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
#: What `tfjob-operator new` writes for choices the examples do not cover.
SCAFFOLDS = {
    "new-default": scaffold.choices("plain"),
    "new-pss-chief-evaluator": scaffold.choices("pss", strategy="pss", evaluator=True),
    "new-tensorboard-on-a-claim": scaffold.choices("tb", tensorboard=True, pvc="data"),
    "new-gpus": scaffold.choices("gpus", gpus=2),
}


def shipped_jobs() -> dict[str, dict[str, Any]]:
    """Every TFJob the project ships, by where it comes from."""
    jobs = {}
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        jobs[str(path.relative_to(ROOT))] = documents[-1]
    for name, choices in SCAFFOLDS.items():
        documents = list(yaml.safe_load_all(scaffold.render(choices, name)))
        jobs[name] = [d for d in documents if d][-1]
    return jobs


def pods_of(job: dict[str, Any], namespace: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The first pod of each replica type, as the operator renders it, and the job's
    TensorBoard's pod if it asks for one."""
    ref = JobRef(namespace, job["metadata"]["name"], JOB_UID)
    spec = parse_spec(ref.name, job["spec"])
    for replica_type in spec.replica_specs:
        yield replica_type.value, render_pod(ref, spec, Replica(replica_type, 0), 0)
    board = board_spec(JobView(ref, "1", 1, False, job["spec"], {}))
    if board is not None:
        deployment = render_board(ref, spec, board, "tensorboard:latest")[0]
        template = deployment["spec"]["template"]
        metadata = {"name": "tensorboard", **template["metadata"]}
        yield "TensorBoard", {"metadata": metadata, "spec": template["spec"]}


def create_dry_run(kubectl: Any, namespace: str, pod: dict[str, Any]) -> Any:
    body = {"apiVersion": "v1", "kind": "Pod", **pod}
    body["metadata"] = {**body["metadata"], "namespace": namespace}
    body["metadata"].pop("ownerReferences", None)
    return kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-",
        input=json.dumps(body), check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def restricted(rest: Rest) -> Iterator[str]:
    name = "pod-security-restricted"
    create_namespace(rest, name, RESTRICTED)
    yield name
    delete_namespace(rest, name)


JOBS = shipped_jobs()


@pytest.mark.parametrize("source", sorted(JOBS))
def test_every_pod_of_a_shipped_tfjob_passes_restricted(
    kubectl: Any, restricted: str, source: str
) -> None:
    checked = []
    for what, pod in pods_of(JOBS[source], restricted):
        created = create_dry_run(kubectl, restricted, pod)
        assert created.returncode == 0, f"{source}: the {what} pod is refused: {created.stderr}"
        assert "Warning" not in created.stderr, created.stderr
        checked.append(what)
    assert checked


def test_the_operator_pod_the_chart_renders_passes_restricted(
    kubectl: Any, restricted: str
) -> None:
    rendered = run_helm(None, "template", RELEASE, str(CHART), "-n", restricted)
    assert rendered.returncode == 0, rendered.stderr
    (deployment,) = [
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"
    ]
    template = deployment["spec"]["template"]
    spec = {**template["spec"], "serviceAccountName": "default"}
    created = create_dry_run(kubectl, restricted, {"metadata": {"name": "operator"}, "spec": spec})
    assert created.returncode == 0, created.stderr


def test_the_namespace_refuses_a_pod_that_asks_for_nothing(kubectl: Any, restricted: str) -> None:
    bare = {
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    refused = create_dry_run(kubectl, restricted, bare)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
