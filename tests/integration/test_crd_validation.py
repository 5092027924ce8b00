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
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "charts" / "tfjob-operator" / "crds" / "tfjobs.tfjob.dev.yaml"
IMAGE = "tensorflow/tensorflow:2.21.0"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
Manifest = dict[str, Any]


def test_crd_fits_client_side_apply(kubectl: Kubectl) -> None:
    """`kubectl apply` (client-side) keeps the whole CRD in an annotation of at most 256 KiB;
    a server-side dry run checks that annotation like a real apply would."""
    applied = kubectl("apply", "--dry-run=server", "-f", str(CRD_FILE), check=False)
    assert applied.returncode == 0, applied.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/tfjobs.tfjob.dev" in applied.stdout


def container(name: str = "tensorflow", image: str | None = IMAGE, **fields: Any) -> Manifest:
    out: Manifest = {"name": name, **fields}
    if image is not None:
        out["image"] = image
    return out


def replica(replicas: int | None = None, containers: list[Manifest] | None = None) -> Manifest:
    spec: Manifest = {"template": {"spec": {"containers": containers or [container()]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def tfjob(replica_specs: Manifest | None = None, name: str = "job", **spec_fields: Any) -> Manifest:
    specs = {"Worker": replica(2)} if replica_specs is None else replica_specs
    return {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs, **spec_fields},
    }


def apply(kubectl: Kubectl, namespace: str, manifest: Manifest) -> subprocess.CompletedProcess[str]:
    """`kubectl apply` of one manifest; the caller checks the outcome."""
    return kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def get_tfjob(kubectl: Kubectl, namespace: str, name: str) -> Manifest:
    result = kubectl("get", "tfjob", name, "-n", namespace, "-o", "json")
    loaded: Manifest = json.loads(result.stdout)
    return loaded


@dataclass(frozen=True)
class Rejected:
    """A TFJob the API server must reject, and fragments its error message must contain."""

    id: str
    manifest: Manifest
    expected: tuple[str, ...]


TOO_LONG_FOR_WORKER_99 = "a" * 54  # + "-worker-99" = 64 characters
TOO_LONG_FOR_EVALUATOR_0 = "b" * 53  # + "-evaluator-0" = 65 characters
UNSUPPORTED_GANG = "is not supported yet: tfjob.dev has no gang-scheduler integration"

REJECTED = [
    # spec.tfReplicaSpecs
    Rejected(
        "no-replica-specs",
        tfjob({}),
        (
            "spec.tfReplicaSpecs: Required value: tfReplicaSpecs must define at least one "
            "replica type (Chief, Master, PS, Worker, Evaluator)",
        ),
    ),
    Rejected(
        "unknown-replica-type",
        tfjob({"Worker": replica(), "Launcher": replica()}),
        (
            "spec.tfReplicaSpecs: Invalid value",
            'unknown replica type(s) ["Launcher"]: tfReplicaSpecs keys must be Chief, Master, '
            "PS, Worker, Evaluator (case-sensitive)",
        ),
    ),
    Rejected(
        "lowercase-replica-type",
        tfjob({"worker": replica()}),
        ('unknown replica type(s) ["worker"]',),
    ),
    Rejected(
        "chief-and-master",
        tfjob({"Chief": replica(), "Master": replica(), "Worker": replica()}),
        (
            "spec.tfReplicaSpecs: Invalid value",
            "tfReplicaSpecs cannot have both Chief and Master: Master is the legacy name of "
            "Chief, use one of them",
        ),
    ),
    Rejected(
        "two-chiefs",
        tfjob({"Chief": replica(2)}),
        (
            "spec.tfReplicaSpecs.[Chief].replicas",
            "Chief replicas is 2, it must be 0 or 1: a TensorFlow cluster has at most one chief",
        ),
    ),
    Rejected(
        "two-masters",
        tfjob({"Master": replica(2), "Worker": replica()}),
        ("spec.tfReplicaSpecs.[Master].replicas", "Master replicas is 2, it must be 0 or 1"),
    ),
    Rejected(
        "two-evaluators",
        tfjob({"Worker": replica(), "Evaluator": replica(2)}),
        (
            "spec.tfReplicaSpecs.[Evaluator].replicas",
            "Evaluator replicas is 2, it must be 0 or 1: a TensorFlow cluster has at most one "
            "evaluator",
        ),
    ),
    Rejected(
        "ps-without-worker",
        tfjob({"Chief": replica(), "PS": replica(2)}),
        (
            "spec.tfReplicaSpecs.[PS]",
            "PS replicas need at least one Worker replica: parameter servers only serve workers",
        ),
    ),
    Rejected(
        "ps-with-zero-workers",
        tfjob({"Chief": replica(), "PS": replica(1), "Worker": replica(0)}),
        ("PS replicas need at least one Worker replica",),
    ),
    Rejected(
        "nothing-decides-success",
        tfjob({"Worker": replica(0), "Evaluator": replica(1)}),
        (
            "spec.tfReplicaSpecs: Invalid value",
            "at least one Chief, Master or Worker replica is required: the chief (or worker 0 "
            "when there is no chief) decides when the job succeeds",
        ),
    ),
    # ReplicaSpec
    Rejected(
        "negative-replicas",
        tfjob({"Worker": replica(-1)}),
        ("spec.tfReplicaSpecs.Worker.replicas: Invalid value: -1", "greater than or equal to 0"),
    ),
    Rejected(
        "unknown-restart-policy",
        tfjob({"Worker": {**replica(), "restartPolicy": "Sometimes"}}),
        (
            'spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: "Sometimes"',
            '"Always", "OnFailure", "Never", "ExitCode"',
        ),
    ),
    Rejected(
        "missing-template",
        tfjob({"Worker": {"replicas": 1}}),
        ("spec.tfReplicaSpecs.Worker.template: Required value",),
    ),
    Rejected(
        "no-tensorflow-container",
        tfjob({"Worker": replica(containers=[container("trainer")])}),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: "
            "template.spec.containers must include a container named 'tensorflow': the "
            "operator sets TF_CONFIG and the TensorFlow port on it",
        ),
    ),
    Rejected(
        "template-without-spec",
        tfjob({"Worker": {"template": {"metadata": {"labels": {"a": "b"}}}}}),
        ("spec.tfReplicaSpecs[Worker].template.spec.containers: Required value",),
    ),
    Rejected(
        "tensorflow-container-without-image",
        tfjob({"Worker": replica(containers=[container(image=None)])}),
        (
            "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: every "
            "container of the template needs a non-empty image",
        ),
    ),
    Rejected(
        "tensorflow-container-empty-image",
        tfjob({"Chief": replica(containers=[container(image="")])}),
        ("spec.tfReplicaSpecs[Chief].template.spec.containers: Required value: every container",),
    ),
    Rejected(
        "sidecar-without-image",
        tfjob({"Worker": replica(containers=[container(), container("sidecar", image=None)])}),
        ("every container of the template needs a non-empty image",),
    ),
    # Pod template: the full PodTemplateSpec schema of Kubernetes v1.34
    Rejected(
        "template-typo-resourceas",
        tfjob({"Worker": replica(containers=[container(resourceas={"limits": {"cpu": "1"}})])}),
        ('unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resourceas"',),
    ),
    Rejected(
        "template-typo-in-pod-spec",
        tfjob(
            {"Worker": {"template": {"spec": {"containers": [container()], "nodeSelektor": {}}}}}
        ),
        ('unknown field "spec.tfReplicaSpecs.Worker.template.spec.nodeSelektor"',),
    ),
    Rejected(
        "template-bad-quantity",
        tfjob({"Worker": replica(containers=[container(resources={"limits": {"memory": "2Gb"}})])}),
        (
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.memory: "
            'Invalid value: "2Gb"',
            "should match",
        ),
    ),
    Rejected(
        "template-wrong-type",
        tfjob({"Worker": replica(containers=[container(ports=[{"containerPort": "http"}])])}),
        ("spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",),
    ),
    # metadata.name
    Rejected(
        "name-too-long-for-worker-99",
        tfjob({"Worker": replica(100)}, name=TOO_LONG_FOR_WORKER_99),
        (
            "metadata.name: Invalid value",
            "metadata.name is too long: the longest child name <name>-<replica type>-<index> "
            "would have 64 characters, more than the DNS-1035 limit of 63; with these replicas "
            "the name may have at most 53 characters",
        ),
    ),
    Rejected(
        "name-too-long-for-evaluator-0",
        tfjob({"Worker": replica(1), "Evaluator": replica(1)}, name=TOO_LONG_FOR_EVALUATOR_0),
        ("would have 65 characters", "the name may have at most 51 characters"),
    ),
    Rejected(
        "name-starts-with-digit",
        tfjob(name="1job"),
        (
            "metadata.name: Invalid value",
            "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter, no dots): it prefixes the names of the job's pods and "
            "services",
        ),
    ),
    Rejected("name-with-dot", tfjob(name="mnist.v2"), ("must be a DNS-1035 label",)),
    # spec.runPolicy
    *(
        Rejected(
            f"scheduling-{field}",
            tfjob(runPolicy={"schedulingPolicy": {field: value}}),
            (f"spec.runPolicy.schedulingPolicy.{field}: Forbidden: {field} {UNSUPPORTED_GANG}",),
        )
        for field, value in (
            ("minAvailable", 3),
            ("queue", "research"),
            ("minResources", {"cpu": "8"}),
            ("scheduleTimeoutSeconds", 60),
        )
    ),
    Rejected(
        "managed-by-kueue",
        tfjob(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}),
        (
            "spec.runPolicy.managedBy: Invalid value",
            "managedBy kueue.x-k8s.io/multikueue is not supported: it must be "
            "tfjob.dev/tfjob-operator or unset, no other controller manages tfjob.dev TFJobs",
        ),
    ),
    Rejected(
        "unknown-clean-pod-policy",
        tfjob(runPolicy={"cleanPodPolicy": "Finished"}),
        ('spec.runPolicy.cleanPodPolicy: Unsupported value: "Finished"',),
    ),
    Rejected(
        "zero-active-deadline",
        tfjob(runPolicy={"activeDeadlineSeconds": 0}),
        ("spec.runPolicy.activeDeadlineSeconds: Invalid value: 0", "greater than or equal to 1"),
    ),
    Rejected(
        "negative-backoff-limit",
        tfjob(runPolicy={"backoffLimit": -1}),
        ("spec.runPolicy.backoffLimit: Invalid value: -1",),
    ),
    Rejected(
        "negative-ttl",
        tfjob(runPolicy={"ttlSecondsAfterFinished": -5}),
        ("spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -5",),
    ),
    Rejected(
        "run-policy-typo",
        tfjob(runPolicy={"cleanPodPolcy": "All"}),
        ('unknown field "spec.runPolicy.cleanPodPolcy"',),
    ),
    # the rest of spec
    Rejected(
        "unknown-success-policy",
        tfjob(successPolicy="AnyWorker"),
        (
            'spec.successPolicy: Unsupported value: "AnyWorker"',
            'supported values: "", "AllWorkers"',
        ),
    ),
    Rejected(
        "dynamic-worker",
        tfjob(enableDynamicWorker=True),
        (
            "spec.enableDynamicWorker: Forbidden: enableDynamicWorker is not supported yet: "
            "every replica gets the full cluster in TF_CONFIG",
        ),
    ),
    Rejected(
        "no-spec",
        {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "metadata": {"name": "job"}},
        ("spec: Required value",),
    ),
]


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
    ("minimal", tfjob({"Worker": replica()})),
    # 53 + "-worker-99" is exactly 63 characters.
    ("name-at-the-limit", tfjob({"Worker": replica(100)}, name="c" * 53)),
    ("master-alias", tfjob({"Master": replica(1), "Worker": replica(3), "PS": replica(2)})),
    ("chief-and-evaluator", tfjob({"Chief": replica(1), "Evaluator": replica(1)})),
    ("zero-replicas-allowed", tfjob({"Chief": replica(0), "Worker": replica(1)})),
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
        "exit-code-policy-and-sidecar",
        tfjob(
            {
                "Worker": {
                    **replica(2, [container(), container("logger", image="busybox")]),
                    "restartPolicy": "ExitCode",
                }
            }
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
    for replica_type, replica_spec in stored["tfReplicaSpecs"].items():
        asked = given["tfReplicaSpecs"][replica_type]
        assert replica_spec["replicas"] == asked.get("replicas", 1)
        assert replica_spec["restartPolicy"] == asked.get("restartPolicy", "Never")
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
    manifest = tfjob({"Worker": replica(3)})
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
    assert apply(kubectl, namespace, tfjob({"Worker": replica(3)})).returncode == 0
    assert put_status(kubectl, namespace, "job", OPERATOR_STATUS).returncode == 0

    printed = kubectl("get", "tfj", "-n", namespace).stdout.splitlines()
    assert printed[0].split() == ["NAME", "STATE", "ACTIVE", "SUCCEEDED", "RESTARTS", "AGE"]
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
    assert columns == ["Name", "State", "Active", "Succeeded", "Restarts", "Age"]
    (row,) = table["rows"]
    status = row["object"]["status"]
    assert status["state"]
    assert row["cells"][:5] == [
        "job",
        status["state"],
        status.get("activeReplicas"),
        status.get("succeededReplicas"),
        status.get("restartCount"),
    ]

    for category in ("tfjob-operator", "ml"):
        listed = kubectl("get", category, "-n", namespace, "-o", "name")
        assert listed.stdout.split() == ["tfjob.tfjob.dev/job"], category


def explain(kubectl: Kubectl, field: str) -> subprocess.CompletedProcess[str]:
    """`kubectl explain`, retried while the API server has not yet published the schema."""
    deadline = time.monotonic() + 60
    while True:
        result = kubectl("explain", field, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            return result
        time.sleep(1)


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
