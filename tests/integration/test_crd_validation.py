"""The TFJob CRD against a real API server: every rule rejects what it should, with a message
that names the field, and a Kubeflow-style TFJob is accepted with the defaults applied.

Everything goes through the built kubectl (`kubectl apply`, strict field validation by
default), as a user would run it. The CRD is the committed file, installed once per session
by the `tfjob_crd` fixture (tests/support/fixtures.py). Other tests of the session may run
the operator, which watches every namespace: the checks here read only the spec (which the
operator never writes), server-side dry runs, or a status read together with its table row.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from support.builders import Manifest, container, replica_spec, tfjob
from support.checkout import ROOT
from support.rejected_tfjobs import REJECTED, Rejected
from support.tfjobs import find_condition
from support.waiting import wait_until

CRD_FILE = ROOT / "charts" / "tfjob-operator" / "crds" / "tfjobs.tfjob.dev.yaml"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def test_crd_fits_client_side_apply(kubectl: Kubectl) -> None:
    """`kubectl apply` (client-side) keeps the whole CRD in an annotation of at most 256 KiB;
    a server-side dry run checks that annotation like a real apply would."""
    applied = kubectl("apply", "--dry-run=server", "-f", str(CRD_FILE), check=False)
    assert applied.returncode == 0, applied.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/tfjobs.tfjob.dev" in applied.stdout


def apply(kubectl: Kubectl, namespace: str, manifest: Manifest) -> subprocess.CompletedProcess[str]:
    """`kubectl apply` of one manifest; the caller checks the outcome."""
    return kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def get_tfjob(kubectl: Kubectl, namespace: str, name: str) -> Manifest:
    result = kubectl("get", "tfjob", name, "-n", namespace, "-o", "json")
    loaded: Manifest = json.loads(result.stdout)
    return loaded


@pytest.mark.usefixtures("tfjob_crd")
@pytest.mark.parametrize("case", REJECTED, ids=[case.id for case in REJECTED])
def test_invalid_tfjob_is_rejected(kubectl: Kubectl, namespace: str, case: Rejected) -> None:
    result = apply(kubectl, namespace, case.manifest)
    assert result.returncode != 0, f"accepted:\n{result.stdout}"
    for fragment in case.expected:
        assert fragment in result.stderr
    name = case.manifest["metadata"]["name"]
    lookup = kubectl("get", "tfjob", name, "-n", namespace, check=False)
    assert lookup.returncode != 0
    assert "NotFound" in lookup.stderr


KUBEFLOW_STYLE = """
apiVersion: tfjob.dev/v1
kind: TFJob
metadata:
  name: dist-mnist
spec:
  tfReplicaSpecs:
    PS:
      replicas: 1
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            sidecar.istio.io/inject: "false"
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:latest
            imagePullPolicy: IfNotPresent
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:latest
            args: ["--train_steps", "100"]
            ports:
            - containerPort: 2222
              name: tfjob-port
            resources:
              limits:
                nvidia.com/gpu: 1
                memory: 4Gi
                cpu: "0.5"
          tolerations:
          - key: nvidia.com/gpu
            operator: Exists
            effect: NoSchedule
"""


@pytest.mark.usefixtures("tfjob_crd")
def test_kubeflow_style_tfjob_is_accepted_with_defaults(kubectl: Kubectl, namespace: str) -> None:
    result = kubectl("apply", "-n", namespace, "-f", "-", input=KUBEFLOW_STYLE, check=False)
    assert result.returncode == 0, result.stderr
    assert "tfjob.tfjob.dev/dist-mnist created" in result.stdout

    spec = get_tfjob(kubectl, namespace, "dist-mnist")["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": False}
    assert spec["successPolicy"] == ""
    ps, worker = spec["tfReplicaSpecs"]["PS"], spec["tfReplicaSpecs"]["Worker"]
    assert (ps["replicas"], ps["restartPolicy"]) == (1, "OnFailure")
    assert (worker["replicas"], worker["restartPolicy"]) == (2, "Never")
    tensorflow = worker["template"]["spec"]["containers"][0]
    assert tensorflow["ports"] == [{"containerPort": 2222, "name": "tfjob-port", "protocol": "TCP"}]
    assert tensorflow["resources"]["limits"] == {
        "nvidia.com/gpu": 1,
        "memory": "4Gi",
        "cpu": "0.5",
    }
    assert ps["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}


ACCEPTED = [
    ("minimal", tfjob("job", {"Worker": replica_spec(None)})),
    # 53 + "-worker-99" is exactly 63 characters.
    ("name-at-the-limit", tfjob("c" * 53, {"Worker": replica_spec(100)})),
    (
        "master-alias",
        tfjob("job", {"Master": replica_spec(1), "Worker": replica_spec(3), "PS": replica_spec(2)}),
    ),
    ("chief-and-evaluator", tfjob("job", {"Chief": replica_spec(1), "Evaluator": replica_spec(1)})),
    ("zero-replicas-allowed", tfjob("job", {"Chief": replica_spec(0), "Worker": replica_spec(1)})),
    (
        "implemented-policies",
        tfjob(
            successPolicy="AllWorkers",
            enableDynamicWorker=False,
            runPolicy={
                "cleanPodPolicy": "All",
                "ttlSecondsAfterFinished": 0,
                "activeDeadlineSeconds": 600,
                "backoffLimit": 3,
                "suspend": True,
                "managedBy": "tfjob.dev/tfjob-operator",
                "schedulingPolicy": {"priorityClass": "high"},
            },
        ),
    ),
    (
        "gang-of-the-whole-job",
        tfjob(
            "job",
            {"Chief": replica_spec(1), "Worker": replica_spec(3)},
            runPolicy={
                "schedulingPolicy": {
                    "minAvailable": 4,
                    "queue": "research",
                    "minResources": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 4},
                    "scheduleTimeoutSeconds": 60,
                }
            },
        ),
    ),
    (
        "as-many-replicas-as-the-bound",
        tfjob(
            "job", {"Chief": replica_spec(1), "Worker": replica_spec(899), "PS": replica_spec(100)}
        ),
    ),
    (
        "managed-by-another-controller",
        tfjob(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}),
    ),
    (
        "exit-code-policy-and-sidecar",
        tfjob(
            "job",
            {
                "Worker": {
                    **replica_spec(
                        2, containers=[container(), container("logger", image="busybox")]
                    ),
                    "restartPolicy": "ExitCode",
                }
            },
        ),
    ),
]


@pytest.mark.usefixtures("tfjob_crd")
@pytest.mark.parametrize("manifest", [m for _, m in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_valid_tfjob_is_accepted_and_defaulted(
    kubectl: Kubectl, namespace: str, manifest: Manifest
) -> None:
    """A server-side dry run: validated and defaulted exactly like a create, without leaving
    a job for an operator that other tests of the session may be running."""
    result = kubectl(
        "apply", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
        input=yaml.safe_dump(manifest), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)["spec"]
    given = manifest["spec"]
    assert stored["tfReplicaSpecs"].keys() == given["tfReplicaSpecs"].keys()
    for replica_type, defaulted in stored["tfReplicaSpecs"].items():
        asked = given["tfReplicaSpecs"][replica_type]
        assert defaulted["replicas"] == asked.get("replicas", 1)
        assert defaulted["restartPolicy"] == asked.get("restartPolicy", "Never")
    run_policy = given.get("runPolicy", {})
    assert stored["runPolicy"]["cleanPodPolicy"] == run_policy.get("cleanPodPolicy", "Running")
    assert stored["runPolicy"]["suspend"] == run_policy.get("suspend", False)
    assert stored["successPolicy"] == given.get("successPolicy", "")


# What the operator writes into the status subresource; nothing of it may be pruned.
OPERATOR_STATUS: Manifest = {
    "conditions": [
        {
            "type": "Created",
            "status": "True",
            "reason": "TFJobCreated",
            "message": "TFJob job created",
            "lastUpdateTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Running",
            "status": "True",
            "reason": "TFJobRunning",
            "message": "3 pods running",
            "lastUpdateTime": "2026-01-01T00:01:00Z",
            "lastTransitionTime": "2026-01-01T00:01:00Z",
        },
    ],
    "state": "Running",
    "replicaStatuses": {
        "Worker": {
            "active": 2,
            "succeeded": 1,
            "failed": 0,
            "restarts": 1,
            "selector": "tfjob.dev/job-name=job,tfjob.dev/replica-type=worker",
            "succeededIndexes": [2],
        }
    },
    "activeReplicas": 2,
    "succeededReplicas": 1,
    "failedReplicas": 0,
    "restartCount": 1,
    "replicaGenerations": {"worker-0": 1},
    "startTime": "2026-01-01T00:00:05Z",
    "lastReconcileTime": "2026-01-01T00:01:00Z",
    "observedGeneration": 1,
}


def put_status(
    kubectl: Kubectl, namespace: str, name: str, status: Manifest, *extra: str
) -> subprocess.CompletedProcess[str]:
    """Replace the whole status through the status subresource, as the operator does."""
    patch = [{"op": "add", "path": "/status", "value": status}]
    return kubectl(
        "patch", "tfjob", name, "-n", namespace, "--subresource=status", "--type=json",
        "-p", json.dumps(patch), *extra, check=False,
    )  # fmt: skip


@pytest.mark.usefixtures("tfjob_crd")
def test_status_subresource_keeps_what_the_operator_writes(
    kubectl: Kubectl, namespace: str
) -> None:
    manifest = tfjob("job", {"Worker": replica_spec(3)})
    with_status = {**manifest, "status": OPERATOR_STATUS}
    created = kubectl(
        "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
        input=json.dumps(with_status),
    )  # fmt: skip
    assert "status" not in json.loads(created.stdout), "status was set through the main resource"

    assert apply(kubectl, namespace, manifest).returncode == 0
    # Dry runs: whether or not an operator also writes this job's status, the answer is
    # exactly what the API server would store for this patch.
    patched = put_status(kubectl, namespace, "job", OPERATOR_STATUS, "--dry-run=server", "-o=json")
    assert patched.returncode == 0, patched.stderr
    assert json.loads(patched.stdout)["status"] == OPERATOR_STATUS

    bad = put_status(kubectl, namespace, "job", {"state": "Exploded"}, "--dry-run=server")
    assert bad.returncode != 0
    assert 'status.state: Unsupported value: "Exploded"' in bad.stderr


@pytest.mark.usefixtures("tfjob_crd")
def test_get_prints_state_and_replica_columns(
    kubectl: Kubectl, k8s_client: Any, namespace: str
) -> None:
    assert apply(kubectl, namespace, tfjob("job", {"Worker": replica_spec(3)})).returncode == 0
    assert put_status(kubectl, namespace, "job", OPERATOR_STATUS).returncode == 0

    printed = kubectl("get", "tfj", "-n", namespace).stdout.splitlines()
    assert printed[0].split() == [
        "NAME",
        "STATE",
        "REASON",
        "ACTIVE",
        "SUCCEEDED",
        "RESTARTS",
        "AGE",
    ]
    assert [line.split()[0] for line in printed[1:]] == ["job"]

    # The rows kubectl prints come from the server's Table; read one together with the
    # object it was made from, so the cells can be compared with the status they show
    # even if an operator updated the status meanwhile.
    table = k8s_client.call_api(
        f"/apis/tfjob.dev/v1/namespaces/{namespace}/tfjobs/job",
        "GET",
        query_params=[("includeObject", "Object")],
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        response_type="object",
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns == [
        "Name",
        "State",
        "Reason",
        "Active",
        "Succeeded",
        "Restarts",
        "Age",
        "Message",
    ]
    (row,) = table["rows"]
    status = row["object"]["status"]
    assert status["state"]
    running = find_condition(row["object"], "Running") or {}
    assert row["cells"][:6] == [
        "job",
        status["state"],
        running.get("reason", ""),
        status.get("activeReplicas"),
        status.get("succeededReplicas"),
        status.get("restartCount"),
    ]
    assert row["cells"][7] == running.get("message", "")

    for category in ("tfjob-operator", "ml"):
        listed = kubectl("get", category, "-n", namespace, "-o", "name")
        assert listed.stdout.split() == ["tfjob.tfjob.dev/job"], category


def explain(kubectl: Kubectl, field: str) -> subprocess.CompletedProcess[str]:
    """`kubectl explain`, retried while the API server has not yet published the schema."""
    return wait_until(
        lambda: kubectl("explain", field, check=False),
        60,
        lambda result: f"kubectl explain {field}: {result.stderr}",
        until=lambda result: result.returncode == 0,
        interval=1,
    )


@pytest.mark.usefixtures("tfjob_crd")
def test_explain_describes_our_fields_and_the_pod_template(kubectl: Kubectl) -> None:
    run_policy = explain(kubectl, "tfjob.spec.runPolicy")
    assert run_policy.returncode == 0, run_policy.stderr
    text = " ".join(run_policy.stdout.split())
    assert "Policies for the whole job: cleanup, deadlines, retries, suspension." in text
    for field in (
        "activeDeadlineSeconds",
        "backoffLimit",
        "cleanPodPolicy",
        "managedBy",
        "schedulingPolicy",
        "suspend",
        "ttlSecondsAfterFinished",
    ):
        assert f"{field}\t<" in run_policy.stdout
    assert "Which pods to delete when the job finishes" in text

    resources = explain(kubectl, "tfj.spec.tfReplicaSpecs.template.spec.containers.resources")
    assert resources.returncode == 0, resources.stderr
    assert "limits\t<map[string]" in resources.stdout
    assert "requests\t<map[string]" in resources.stdout
