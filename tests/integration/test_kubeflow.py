"""Kubeflow's kubeflow.org/v1 TFJobs, run by `tfjob-operator run --kubeflow` on the local
cluster: their CRD as the chart installs it, the labels and status Kubeflow's clients read,
and jobs left to the controller their runPolicy.managedBy names.

The module installs tfjobs.kubeflow.org and runs its own operator with --kubeflow instead
of the session's (the `kubeflow_operator` fixture).
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
from support.builders import SHELL_IMAGE, UNTIL_TOLD, shell_replica, tfjob
from support.cluster import Kubectl
from support.fixtures import INVALID_POD_GRACE_SECONDS
from support.rejected_tfjobs import POD_API, REJECTED, Rejected
from support.tfjobs import TFJobs, condition, find_condition

from harness.operator_process import OperatorProcess
from harness.promtext import counters
from tfjob_operator.apiserver.errors import ApiError

KUBEFLOW = "kubeflow.org"
POD_API_CASES = [case for case in REJECTED if case.server_only == POD_API]
SLEEP = "sleep 3600"
#: Worker 0 succeeds (and so the job) when the test tells it to finish.
WORKER_0_EXITS_LATER = (
    f'if [ "$HOSTNAME" = mnist-worker-0 ]; then {UNTIL_TOLD}; exit 0; fi; {SLEEP}'
)


def kubeflow_tfjob(name: str, replica_specs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**tfjob(name, replica_specs, **spec), "apiVersion": "kubeflow.org/v1"}


def test_a_kubeflow_tfjob_gets_kubeflows_labels_owner_and_status(
    kubeflow_jobs: TFJobs, kubectl: Kubectl
) -> None:
    kubeflow_jobs.create(
        kubeflow_tfjob(
            "mnist",
            {
                "PS": shell_replica(SLEEP),
                "Worker": shell_replica(WORKER_0_EXITS_LATER, 2),
            },
        )
    )
    running = kubeflow_jobs.wait_state("mnist", "Running", 60)
    assert condition(running, "Running")["reason"] == "TFJobRunning"
    statuses = running["status"]["replicaStatuses"]
    assert statuses["Worker"]["active"] == 2
    assert statuses["Worker"]["selector"] == (
        "training.kubeflow.org/job-name=mnist,training.kubeflow.org/replica-type=worker"
    )
    assert running["status"]["startTime"]

    pods = {p["metadata"]["name"]: p for p in kubeflow_jobs.pods("mnist")}
    services = {s["metadata"]["name"]: s for s in kubeflow_jobs.services("mnist")}
    assert sorted(pods) == sorted(services) == ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    for name, child in [*pods.items(), *services.items()]:
        labels = child["metadata"]["labels"]
        replica_type, index = name.split("-")[1:]
        assert labels["training.kubeflow.org/operator-name"] == "tfjob-controller"
        assert labels["training.kubeflow.org/job-name"] == "mnist"
        assert labels["training.kubeflow.org/replica-type"] == replica_type
        assert labels["training.kubeflow.org/replica-index"] == index
        # Without a chief, worker 0 is the master role, as Kubeflow labels it.
        assert labels.get("training.kubeflow.org/job-role") == (
            "master" if name == "mnist-worker-0" else None
        )
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == (
            "kubeflow.org/v1",
            "TFJob",
            "mnist",
        )
        assert owner["uid"] == running["metadata"]["uid"]
        assert owner["controller"]
    selected = kubeflow_jobs.rest.get(
        f"/api/v1/namespaces/{kubeflow_jobs.namespace}/pods",
        {"labelSelector": statuses["Worker"]["selector"]},
    )["items"]
    assert sorted(p["metadata"]["name"] for p in selected) == ["mnist-worker-0", "mnist-worker-1"]

    kubectl.tell_to_finish(kubeflow_jobs.namespace, "mnist-worker-0")
    done = kubeflow_jobs.wait_state("mnist", "Succeeded", 60)
    assert condition(done, "Succeeded")["reason"] == "TFJobSucceeded"
    assert condition(done, "Created")["reason"] == "TFJobCreated"
    assert done["status"]["completionTime"]
    events = kubeflow_jobs.wait_events("mnist", ["SuccessfulCreatePod", "TFJobSucceeded"])
    assert {e["involvedObject"]["apiVersion"] for e in events} == {"kubeflow.org/v1"}


def test_jobs_another_controller_manages_are_left_alone(
    kubeflow_jobs: TFJobs,
) -> None:
    ours = TFJobs(kubeflow_jobs.kubeconfig, kubeflow_jobs.namespace)
    others = [
        (kubeflow_jobs, "kubeflows", "kubeflow.org/training-operator"),
        (kubeflow_jobs, "multikueue", "kueue.x-k8s.io/multikueue"),
        (ours, "elsewhere", "example.com/another-operator"),
    ]
    for jobs, name, manager in others:
        body = tfjob(name, {"Worker": shell_replica(SLEEP)}, runPolicy={"managedBy": manager})
        body["apiVersion"] = f"{jobs.group}/v1"
        jobs.create(body)
    # Created after them, and reconciled by the same operator: once it runs, the operator
    # has seen the others and decided to leave them.
    kubeflow_jobs.create(
        kubeflow_tfjob(
            "mine",
            {"Worker": shell_replica(SLEEP)},
            runPolicy={"managedBy": "tfjob.dev/tfjob-operator"},
        )
    )
    kubeflow_jobs.wait_state("mine", "Running", 60)
    time.sleep(2)
    for jobs, name, _ in others:
        assert jobs.get(name).get("status") is None, name
        assert jobs.pods(name) == [], name
        assert jobs.services(name) == [], name
        if name != "multikueue":
            assert jobs.events(name) == [], name
    # MultiKueue's job is read (on a manager the operator makes its Workload), and one
    # that no queue holds says nothing will run it.
    (warning,) = kubeflow_jobs.events("multikueue")
    assert (warning["type"], warning["reason"]) == ("Warning", "NotQueued")
    assert "nothing runs it" in warning["message"]


@pytest.mark.parametrize("group", ["tfjob.dev", KUBEFLOW])
def test_managed_by_is_immutable(kubeflow_operator: OperatorProcess, kubectl: Kubectl,
                                 namespace: str, group: str) -> None:  # fmt: skip
    body = tfjob("fixed", {"Worker": shell_replica(SLEEP)}, runPolicy={"suspend": True})
    body["apiVersion"] = f"{group}/v1"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    resource = f"tfjobs.{group}/fixed"

    def patch(run_policy: dict[str, Any]) -> str:
        result = kubectl(
            "patch", resource, "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"runPolicy": run_policy}}), check=False,
        )  # fmt: skip
        assert result.returncode != 0, f"patch {run_policy} was accepted"
        return result.stderr

    added = patch({"managedBy": "tfjob.dev/tfjob-operator"})
    assert "managedBy is immutable: it cannot be set or removed after the job is created" in added

    body["metadata"]["name"] = "managed"
    body["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    resource = f"tfjobs.{group}/managed"
    changed = patch({"managedBy": "tfjob.dev/tfjob-operator"})
    assert "managedBy is immutable: the controller that manages a job cannot change" in changed
    removed = patch({"managedBy": None})
    assert "managedBy is immutable" in removed

    # spec.managedBy, the field Kueue's MultiKueue adapter reads: set after creation only
    # as the copy of runPolicy.managedBy, then fixed.
    def patch_spec(name: str, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kubectl(
            "patch", f"tfjobs.{group}/{name}", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}), check=False,
        )  # fmt: skip

    unset = patch_spec("fixed", {"managedBy": "kueue.x-k8s.io/multikueue"})
    assert unset.returncode != 0
    assert "nor set after the job is created but as its runPolicy.managedBy" in unset.stderr
    other = patch_spec("managed", {"managedBy": "example.com/other"})
    assert other.returncode != 0
    assert "spec.managedBy is example.com/other but spec.runPolicy.managedBy is" in other.stderr
    mirrored = patch_spec("managed", {"managedBy": "kueue.x-k8s.io/multikueue"})
    assert mirrored.returncode == 0, mirrored.stderr
    for change in ("tfjob.dev/tfjob-operator", None):
        refused = patch_spec("managed", {"managedBy": change})
        assert refused.returncode != 0, change
        assert "managedBy is immutable" in refused.stderr

    body["metadata"]["name"] = "malformed"
    body["spec"]["runPolicy"]["managedBy"] = "not a controller"
    rejected = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    assert rejected.returncode != 0
    assert "managedBy not a controller is not a controller name" in rejected.stderr


def test_a_name_taken_in_the_other_group_fails_the_younger_job(
    kubeflow_jobs: TFJobs, kubeflow_operator: OperatorProcess
) -> None:
    ours = TFJobs(kubeflow_jobs.kubeconfig, kubeflow_jobs.namespace)
    ours.create(tfjob("twin", {"Worker": shell_replica(SLEEP, 2)}))
    ours.wait_state("twin", "Running", 60)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in ours.pods("twin")}

    kubeflow_jobs.create(kubeflow_tfjob("twin", {"Worker": shell_replica(SLEEP, 3)}))
    failed = kubeflow_jobs.wait_state("twin", "Failed", 30)
    reason = condition(failed, "Failed")
    assert reason["reason"] == "NameTaken"
    assert "The tfjob.dev/v1 TFJob" in reason["message"]
    assert "has the same name" in reason["message"]

    # The older job keeps its pods, and the younger one created none.
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in ours.pods("twin")} == before
    assert ours.get("twin")["status"]["state"] == "Running"
    kubeflow_uid = failed["metadata"]["uid"]
    children = [*ours.pods("twin"), *ours.services("twin")]
    assert all(c["metadata"]["ownerReferences"][0]["uid"] != kubeflow_uid for c in children)

    # Kubeflow's counters count the jobs of both groups alike, as framework tensorflow.
    labels = f"framework=tensorflow,job_namespace={kubeflow_jobs.namespace}"
    counted = counters(kubeflow_operator.metrics(), "training_operator_jobs_")
    assert {
        what: counted[f"training_operator_jobs_{what}_total{{{labels}}}"]
        for what in ("created", "failed", "successful")
    } == {"created": 2, "failed": 1, "successful": 0}


def test_the_kubeflow_crd_rejects_bad_input_like_ours(
    kubeflow_operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    container = {"name": "main", "image": SHELL_IMAGE}
    body = kubeflow_tfjob("bad", {"Worker": {"template": {"spec": {"containers": [container]}}}})
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0
    assert "template.spec.containers must include a container named 'tensorflow'" in result.stderr


def test_a_kubeflow_job_is_deleted_with_its_children(kubeflow_jobs: TFJobs) -> None:
    kubeflow_jobs.create(kubeflow_tfjob("short", {"Worker": shell_replica(SLEEP)}))
    kubeflow_jobs.wait_state("short", "Running", 60)
    kubeflow_jobs.delete("short", propagation="Foreground")
    kubeflow_jobs.wait_gone("short", 60)
    with pytest.raises(ApiError) as gone:
        kubeflow_jobs.get("short")
    assert gone.value.status == 404


@pytest.mark.parametrize("case", POD_API_CASES, ids=[case.id for case in POD_API_CASES])
def test_the_kubeflow_crd_accepts_the_pods_kubeflows_accepts(
    kubeflow_operator: OperatorProcess, kubectl: Kubectl, namespace: str, case: Rejected
) -> None:
    """tfjob.dev refuses at apply what the Pod API would; kubeflow.org accepts what Kubeflow's
    CRD accepts, and reports the refused pod in the job's conditions instead."""
    body = {**case.manifest, "apiVersion": "kubeflow.org/v1"}
    result = kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(body), check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_kubeflow_job_whose_pod_is_refused_says_why_and_fails_after_the_grace(
    kubeflow_jobs: TFJobs,
) -> None:
    worker = shell_replica(SLEEP)
    worker["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data"}
    ]
    kubeflow_jobs.create(kubeflow_tfjob("mounts", {"Worker": worker}))
    job = kubeflow_jobs.wait_for(
        "mounts",
        lambda j: (find_condition(j, "Running") or {}).get("reason") == "FailedCreatePod",
        "the refused pod in the Running condition",
        10,
    )
    message = condition(job, "Running")["message"]
    assert message.startswith("worker-0: the API server refused its pod (422 Invalid): ")
    assert 'volumeMounts[0].name: Not found: "data"' in message
    failed = kubeflow_jobs.wait_state("mounts", "Failed", INVALID_POD_GRACE_SECONDS + 15)
    assert condition(failed, "Failed")["reason"] == "FailedCreatePod"
    # Kubeflow's clients read the latest condition: Failed, with the API server's words.
    assert failed["status"]["conditions"][-1]["type"] == "Failed"
