"""A `kubeflow.org/v1` TFJob's TensorBoard, asked for with the `tfjob.dev/tensorboard`
annotation (Kubeflow's schema has no field for it), against the real API server and
kubelet with `tfjob-operator run --kubeflow`: the operator runs a real TensorBoard (the
trainer image's) on the job's claim, reports it in the status, the client's port-forward
serves its page, and it goes with the job; a bad annotation is an event and a status
message, and the job runs regardless. The tfjob.dev field, with real training and a
browser: tests/e2e/test_tensorboard.py.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kubernetes import client
from support.builders import SHELL_IMAGE
from support.tfjobs import TFJobs
from support.waiting import wait_until

from harness.operator_process import OperatorProcess
from tfjob_operator.client import TFJobClient

CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "logs"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def kubeflow_job(name: str, annotation: str, script: str = "sleep 3600") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "annotations": {"tfjob.dev/tensorboard": annotation}},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {
                                    "name": "tensorflow",
                                    "image": SHELL_IMAGE,
                                    "command": ["sh", "-c", script],
                                    "volumeMounts": [{"name": "logs", "mountPath": "/logs"}],
                                }
                            ],
                            "volumes": [
                                {"name": "logs", "persistentVolumeClaim": {"claimName": "logs"}}
                            ],
                        }
                    },
                }
            }
        },
    }


def test_a_kubeflow_job_gets_its_tensorboard_from_the_annotation(
    kubeflow_operator: OperatorProcess,
    project_images: tuple[str, ...],
    kubeconfig: str,
    namespace: str,
    core_v1: client.CoreV1Api,
) -> None:
    core_v1.create_namespaced_persistent_volume_claim(namespace, CLAIM)
    tfjobs = TFJobs(kubeconfig, namespace, group="kubeflow.org")
    annotation = json.dumps({"logDir": "/logs/$(TFJOB_NAME)", "ttlSecondsAfterFinished": 300})
    tfjobs.create(kubeflow_job("board", annotation))
    job = tfjobs.wait_for(
        "board",
        lambda j: bool(((j.get("status") or {}).get("tensorboard") or {}).get("ready")),
        "status.tensorboard.ready",
        180,
    )
    assert job["status"]["tensorboard"] == {
        "name": "board-tensorboard",
        "url": f"http://board-tensorboard.{namespace}.svc:6006/",
        "logDir": "/logs/$(TFJOB_NAME)",
        "ready": True,
    }
    apps = client.AppsV1Api(core_v1.api_client)
    networking = client.NetworkingV1Api(core_v1.api_client)
    policy = networking.read_namespaced_network_policy("board-tensorboard", namespace)
    assert policy.spec.pod_selector.match_labels == {"tfjob.dev/tensorboard-of": "board"}
    deployment = apps.read_namespaced_deployment("board-tensorboard", namespace)
    pod = deployment.spec.template.spec
    assert pod.volumes[0].persistent_volume_claim.claim_name == "logs"
    assert pod.volumes[0].persistent_volume_claim.read_only is True
    assert deployment.metadata.owner_references[0].uid == job["metadata"]["uid"]

    with TFJobClient(namespace, kubeconfig=kubeconfig).tensorboard("board") as forward:
        with urllib.request.urlopen(forward.url, timeout=30) as page:
            assert "<title>TensorBoard</title>" in page.read().decode()
        with urllib.request.urlopen(forward.url + "data/environment", timeout=30) as answer:
            # The TensorBoard reads the job's directory: $(TFJOB_NAME) expanded.
            assert json.loads(answer.read())["data_location"] == "/logs/board"

    # Deleted with the job (it is the job's child), as are its pods.
    tfjobs.delete("board")
    wait_until(
        lambda: apps.list_namespaced_deployment(namespace).items,
        60,
        "the TensorBoard to go with its job",
        until=lambda boards: not boards,
        interval=0.5,
    )


def test_a_bad_annotation_is_reported_and_the_job_runs_regardless(
    kubeflow_operator: OperatorProcess, namespace: str, core_v1: client.CoreV1Api, kubeconfig: str
) -> None:
    tfjobs = TFJobs(kubeconfig, namespace, group="kubeflow.org")
    core_v1.create_namespaced_persistent_volume_claim(namespace, CLAIM)
    tfjobs.create(kubeflow_job("lost", json.dumps({"logDir": "/elsewhere"}), "exit 0"))
    job = tfjobs.wait_state("lost", "Succeeded", 120)
    message = job["status"]["tensorboard"]["message"]
    assert message.startswith("logDir /elsewhere is on no volume of the worker-0 replica's")
    events = [
        e
        for e in core_v1.list_namespaced_event(namespace).items
        if e.reason == "InvalidTensorBoard"
    ]
    assert len(events) == 1
    assert events[0].message == message
    assert events[0].count == 1, "reported once, not at every reconcile"
    assert not client.AppsV1Api(core_v1.api_client).list_namespaced_deployment(namespace).items


def test_a_tensorboard_pod_the_api_server_refuses_is_reported_and_the_job_runs(
    kubeflow_operator: OperatorProcess, namespace: str, core_v1: client.CoreV1Api, kubeconfig: str
) -> None:
    """A quota of one pod: the worker takes it, the TensorBoard's ReplicaSet is refused, and
    the job's status and events say so in the API server's words."""
    core_v1.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}
    )
    wait_until(
        lambda: core_v1.read_namespaced_resource_quota("one-pod", namespace).status.hard,
        30,
        "the quota controller to count the namespace's pods",
        interval=0.2,
    )
    core_v1.create_namespaced_persistent_volume_claim(namespace, CLAIM)
    tfjobs = TFJobs(kubeconfig, namespace, group="kubeflow.org")
    tfjobs.create(kubeflow_job("crowded", json.dumps({"logDir": "/logs"})))
    job = tfjobs.wait_for(
        "crowded",
        lambda j: (
            "message" in ((j.get("status") or {}).get("tensorboard") or {})
            and j["status"].get("state") == "Running"
        ),
        "the job Running, and status.tensorboard.message",
        120,
    )
    board = job["status"]["tensorboard"]
    assert board["ready"] is False
    assert board["message"].startswith("the API server refused the TensorBoard's pod: pods ")
    assert "exceeded quota: one-pod" in board["message"]
    assert job["status"]["state"] == "Running"
    events = [
        e
        for e in core_v1.list_namespaced_event(namespace).items
        if e.reason == "FailedCreateTensorBoardPod"
    ]
    assert len(events) == 1, "one Event, its count the ReplicaSet's tries"
    assert events[0].message.startswith("the API server refused the TensorBoard's pod: pods ")
