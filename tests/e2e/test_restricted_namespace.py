"""A tenant of a shared cluster, on every backend: a namespace that enforces Pod Security
"restricted"; a user who is no admin (a client certificate of the cluster's CA, with no
group but system:authenticated) bound only to Kubernetes' built-in `edit` role there; and
a second user bound to `view`.

As the first user: `tfjob-operator new --tensorboard` on a claim, `kubectl apply` of what it
wrote, the job trains to Succeeded with real TensorFlow, its TensorBoard serves through
the client's port-forward, and its results are read. The operator created the pods and the
TensorBoard in that namespace, so the API server's Pod Security admission accepted them.
The user cannot read TFJobs of another namespace; the `view` user reads the job but cannot
create one.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from support.backends import RELEASE_NAMESPACE, Backend
from support.cluster import Kubectl, create_namespace, delete_namespace
from support.tfjobs import rest_of
from support.waiting import wait_until

from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.client import TFJobClient

NAME = "tenant-digits"
EPOCHS = 4
TRAINING_TIMEOUT = 420
#: The CLI as installed: the console script beside this Python.
CLI = str(Path(sys.executable).parent / "tfjob-operator")
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@dataclass(frozen=True)
class Tenant:
    namespace: str
    #: kubectl as the `edit` user, and as the `view` user.
    editor: Kubectl
    viewer: Kubectl
    editor_kubeconfig: str


@pytest.fixture
def tenant(backend: Backend, request: pytest.FixtureRequest) -> Iterator[Tenant]:
    """The namespace, made by the cluster's admin, with its two users' role bindings."""
    namespace = f"tenant-{request.node.callspec.id}"
    rest = rest_of(backend.kubeconfig)
    rbac = client.RbacAuthorizationV1Api(backend.api_client)
    create_namespace(rest, namespace, RESTRICTED)
    users = {"alice": "edit", "bob": "view"}
    for user, role in users.items():
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{user}-{role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )
    kubeconfigs = {user: backend.cluster.user_kubeconfig(user) for user in users}
    try:
        yield Tenant(
            namespace,
            Kubectl(backend.cluster.kubectl, kubeconfigs["alice"]),
            Kubectl(backend.cluster.kubectl, kubeconfigs["bob"]),
            str(kubeconfigs["alice"]),
        )
    finally:
        delete_namespace(rest, namespace)


def test_an_edit_user_trains_a_scaffolded_job_with_its_tensorboard_in_a_restricted_namespace(
    backend: Backend, tenant: Tenant, tmp_path: Path
) -> None:
    ns = tenant.namespace
    manifest = tmp_path / f"{NAME}.yaml"
    written = subprocess.run(
        [
            CLI, "new", NAME, "--workers", "2", "--tensorboard", "--pvc", "data",
            "--pvc-size", "1Gi", "--image", TRAINER,
            "--train-arg=--epochs", f"--train-arg={EPOCHS}", "-o", str(manifest),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    applied = tenant.editor("apply", "-n", ns, "-f", str(manifest))
    assert f"tfjob.tfjob.dev/{NAME} created" in applied.stdout
    assert "Warning" not in applied.stderr, applied.stderr

    jobs = TFJobClient(ns, kubeconfig=tenant.editor_kubeconfig)
    running = wait_until(
        lambda: jobs.get(NAME),
        TRAINING_TIMEOUT,
        lambda job: f"the TensorBoard of {NAME} to be ready; the job is {job.state}: {job.message}",
        until=lambda job: bool(job.tensorboard.get("ready")) or job.finished,
        interval=1,
    )
    assert not running.finished or running.succeeded, running.message
    with jobs.tensorboard(NAME) as forward:
        page = wait_until(
            lambda: urllib.request.urlopen(forward.url, timeout=10).read().decode(),
            60,
            "TensorBoard's page through the port-forward",
            interval=1,
        )
        assert "<title>TensorBoard</title>" in page
    done = jobs.wait(NAME, timeout=TRAINING_TIMEOUT)
    assert done.succeeded, jobs.describe(NAME)
    result = jobs.results(NAME)["worker-0"]
    assert result["epochs"] == EPOCHS
    assert result["accuracy"] > 0.5

    # The pods the operator made asked for what "restricted" requires; the namespace
    # enforces it (a pod that does not is refused to the same user).
    for pod in client.CoreV1Api(backend.api_client).list_namespaced_pod(ns).items:
        assert pod.spec.security_context.run_as_non_root is True, pod.metadata.name
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "main", "image": TRAINER}]}}  # fmt: skip
    refused = tenant.editor("create", "-n", ns, "-f", "-", input=yaml.safe_dump(bare), check=False)
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr

    # The TensorBoard admits only its namespace's pods (port-forward is not subject to it).
    (policy,) = tenant.viewer("get", "networkpolicy", "-n", ns, "-o", "name").stdout.split()
    assert policy == f"networkpolicy.networking.k8s.io/{NAME}-tensorboard"

    # The editor sees nothing of other namespaces.
    elsewhere = tenant.editor("get", "tfjobs", "-n", RELEASE_NAMESPACE, check=False)
    assert elsewhere.returncode != 0
    assert "Forbidden" in elsewhere.stderr
    with pytest.raises(ApiError) as forbidden:
        TFJobClient(RELEASE_NAMESPACE, kubeconfig=tenant.editor_kubeconfig).list()
    assert forbidden.value.status == 403

    # The viewer reads the job and its logs, and cannot create one.
    shown = tenant.viewer("get", "tfjob", NAME, "-n", ns, "-o", "jsonpath={.status.state}")
    assert shown.stdout == "Succeeded"
    created = tenant.viewer("create", "-n", ns, "-f", str(manifest), check=False)
    assert created.returncode != 0
    assert 'cannot create resource "tfjobs" in API group "tfjob.dev"' in created.stderr
