"""A TFJob's TensorBoard (integrations/tensorboard.py): what it asks for, what runs, when
it goes."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from support.builders import JOB, NOW

from tfjob_operator.api import (
    KUBEFLOW,
    LABEL_JOB_NAME,
    LABEL_TENSORBOARD_DIGEST,
    LABEL_TENSORBOARD_OF,
    JobRef,
)
from tfjob_operator.integrations.tensorboard import (
    DEFAULT_TTL_SECONDS,
    BoardObservation,
    BoardPlan,
    BoardSpec,
    InvalidBoard,
    board_spec,
    observe_board,
    plan_board,
    render_board,
)
from tfjob_operator.job_view import JobView
from tfjob_operator.resources import child_reader
from tfjob_operator.spec import parse_spec
from tfjob_operator.timeutil import to_rfc3339

IMAGE = "ghcr.io/tfjob-operator/tfjob-trainer:0.1.0"
LOG_DIR = "/data/$(TFJOB_NAME)-$(TFJOB_UID)/logs"
STARTED = {"startTime": to_rfc3339(NOW - timedelta(minutes=1))}


def spec(board: dict[str, Any] | None = None, *, claim: str = "training") -> dict[str, Any]:
    worker = {
        "replicas": 2,
        "template": {
            "spec": {
                "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "containers": [
                    {
                        "name": "tensorflow",
                        "image": IMAGE,
                        "volumeMounts": [
                            {"name": "scratch", "mountPath": "/tmp"},
                            {"name": "data", "mountPath": "/data"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                ],
            }
        },
    }
    out: dict[str, Any] = {"tfReplicaSpecs": {"Worker": worker}}
    if board is not None:
        out["tensorboard"] = board
    return out


def view(
    body_spec: dict[str, Any],
    status: dict[str, Any] | None = None,
    *,
    ref: JobRef = JOB,
    annotations: dict[str, str] | None = None,
) -> JobView:
    return JobView(ref, "1", 1, False, body_spec, status or {}, annotations=annotations or {})


def plan(job: JobView, observed: Sequence[BoardObservation] = ()) -> BoardPlan:
    """The plan for `job`, whose status the TFJob's own decision left as it is."""
    return plan_board(job, parse_spec(job.ref.name, job.spec), job.status, observed, NOW, IMAGE)


def shown(body: dict[str, Any], available: bool = False) -> BoardObservation:
    """A child the plan created, as its watch shows it."""
    body = {
        **body,
        "metadata": {**body["metadata"], "uid": f"uid-{body['kind']}"},
        "status": {"availableReplicas": 1 if available else 0},
    }
    return observe_board(body["kind"], body)


def test_a_job_without_a_tensorboard_has_none() -> None:
    assert board_spec(view(spec())) is None
    result = plan(view(spec(), STARTED))
    assert (result.status, result.create, result.events) == (None, [], [])


def test_the_field_and_the_kubeflow_annotation_read_the_same_object() -> None:
    board = {"logDir": LOG_DIR, "ttlSecondsAfterFinished": 60}
    assert board_spec(view(spec(board))) == BoardSpec(LOG_DIR, 60)
    kubeflow = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    annotated = view(spec(), ref=kubeflow, annotations={"tfjob.dev/tensorboard": json.dumps(board)})
    assert board_spec(annotated) == BoardSpec(LOG_DIR, 60)
    assert board_spec(view(spec({"logDir": "/data"}))) == BoardSpec("/data", DEFAULT_TTL_SECONDS)


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ("{logDir: /data}", "is not JSON"),
        ('"/data"', "must be an object"),
        ("{}", "logDir is required"),
        ('{"logDir": "data/logs"}', "absolute path or a URL"),
        ('{"logDir": "/data", "ttl": 5}', "unknown fields \\['ttl'\\]"),
        ('{"logDir": "/data", "ttlSecondsAfterFinished": -1}', "integer >= 0"),
    ],
)
def test_a_bad_annotation_says_what_is_wrong(annotation: str, message: str) -> None:
    kubeflow = JobRef(JOB.namespace, JOB.name, JOB.uid, KUBEFLOW)
    job = view(spec(), STARTED, ref=kubeflow, annotations={"tfjob.dev/tensorboard": annotation})
    with pytest.raises(InvalidBoard, match=message):
        board_spec(job)
    result = plan(job)
    assert result.create == []
    assert result.status is not None
    assert message.replace("\\", "") in result.status["message"]
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "InvalidTensorBoard")]
    again = plan(view(spec(), {**STARTED, "tensorboard": result.status}, ref=kubeflow,
                      annotations={"tfjob.dev/tensorboard": annotation}))  # fmt: skip
    assert again.events == [], "the same refusal is reported once"


def test_it_waits_for_the_job_to_start_and_stays_while_a_started_job_is_suspended() -> None:
    result = plan(view(spec({"logDir": LOG_DIR})))
    assert (result.status, result.create) == (None, [])
    running = plan(view(spec({"logDir": LOG_DIR}), STARTED))
    observed = [shown(body) for body in running.create]
    suspended = plan(view(spec({"logDir": LOG_DIR}), {"tensorboard": running.status}), observed)
    assert (suspended.create, suspended.delete) == ([], [])
    assert suspended.status == running.status


def test_a_started_job_gets_a_deployment_and_a_service_that_read_its_claim() -> None:
    job = view(spec({"logDir": LOG_DIR}), STARTED)
    result = plan(job)
    deployment, service, policy = result.create
    assert (deployment["kind"], service["kind"], policy["kind"]) == (
        "Deployment",
        "Service",
        "NetworkPolicy",
    )
    assert {b["metadata"]["name"] for b in result.create} == {"mnist-tensorboard"}
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["tensorboard"]
    assert container["args"][0] == f"--logdir={LOG_DIR}"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"TFJOB_NAME": "mnist", "TFJOB_NAMESPACE": "ml", "TFJOB_UID": JOB.uid}
    # The volume /data/... lies on, not /tmp, read-only, at the job's own path.
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]
    assert pod["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "training", "readOnly": True}}
    ]
    # As the job's pods' user, with what Pod Security "restricted" requires.
    assert pod["securityContext"] == {
        "runAsUser": 1000,
        "fsGroup": 1000,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["automountServiceAccountToken"] is False
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    labels = pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels == {LABEL_TENSORBOARD_OF: "mnist"}
    assert service["spec"]["selector"] == pod_labels
    assert "tfjob.dev/job-name" not in pod_labels, "the replicas' watch must not see it"
    # Only pods of the job's namespace reach it, on its port.
    assert policy["spec"] == {
        "podSelector": {"matchLabels": pod_labels},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 6006, "protocol": "TCP"}]}],
    }
    assert result.status == {
        "name": "mnist-tensorboard",
        "url": "http://mnist-tensorboard.ml.svc:6006/",
        "logDir": LOG_DIR,
        "ready": False,
    }
    assert result.events == [], "the controller reports a create the server made"


def test_once_shown_nothing_is_created_again_and_ready_follows_the_deployment() -> None:
    job = view(spec({"logDir": LOG_DIR}), STARTED)
    first = plan(job)
    observed = [shown(body, available=True) for body in first.create]
    result = plan(job, observed)
    assert (result.create, result.delete, result.events) == ([], [], [])
    assert result.status is not None
    assert result.status["ready"] is True


def test_a_changed_tensorboard_spec_replaces_the_deployment() -> None:
    old = [shown(b) for b in plan(view(spec({"logDir": LOG_DIR}), STARTED)).create]
    result = plan(view(spec({"logDir": LOG_DIR, "image": "other:1"}), STARTED), old)
    assert sorted(o.kind for o in result.delete) == ["Deployment", "NetworkPolicy", "Service"]
    assert result.create == []
    assert old[0].digest
    assert (
        old[0].digest
        != render_board(
            JOB, parse_spec("mnist", spec()), BoardSpec(LOG_DIR, image="other:1"), "other:1"
        )[0]["metadata"]["labels"][LABEL_TENSORBOARD_DIGEST]
    )


def test_it_stays_after_the_job_ends_until_its_ttl_then_goes() -> None:
    done = {
        **STARTED,
        "completionTime": to_rfc3339(NOW - timedelta(seconds=20)),
        "conditions": [{"type": "Succeeded", "status": "True"}],
    }
    board = {"logDir": LOG_DIR, "ttlSecondsAfterFinished": 30}
    observed = [shown(b, available=True) for b in plan(view(spec(board), STARTED)).create]
    kept = plan(view(spec(board), done), observed)
    assert kept.delete == []
    assert kept.requeue_after == 10
    assert kept.status is not None
    assert kept.status["removeAfter"] == to_rfc3339(NOW + timedelta(seconds=10))
    later = {**done, "completionTime": to_rfc3339(NOW - timedelta(seconds=30))}
    gone = plan(view(spec(board), later), observed)
    assert sorted(o.kind for o in gone.delete) == ["Deployment", "NetworkPolicy", "Service"]
    assert gone.status is None
    assert gone.create == []
    assert gone.why == "ttlSecondsAfterFinished: 30s after the job finished"


def test_children_of_an_earlier_job_of_the_name_are_not_this_jobs() -> None:
    observed = [shown(b) for b in plan(view(spec({"logDir": LOG_DIR}), STARTED)).create]
    newer = JobView(JobRef("ml", "mnist", "uid-2"), "1", 1, False, spec({"logDir": LOG_DIR}),
                    STARTED)  # fmt: skip
    result = plan(newer, observed)
    assert [b["kind"] for b in result.create] == ["Deployment", "Service", "NetworkPolicy"]
    assert result.delete == []


def test_a_job_running_as_root_gets_a_tensorboard_that_does_not() -> None:
    body = spec({"logDir": LOG_DIR})
    body["tfReplicaSpecs"]["Worker"]["template"]["spec"]["securityContext"] = {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "privileged": True,
    }
    deployment = plan(view(body, STARTED)).create[0]
    assert deployment["spec"]["template"]["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_a_pod_the_api_server_refuses_is_said_in_the_status_and_an_event_once() -> None:
    """The Deployment takes its ReplicaSet's ReplicaFailure: a namespace's Pod Security, a
    quota."""
    job = view(spec({"logDir": LOG_DIR}), STARTED)
    refusal = 'pods "mnist-tensorboard-5d8f7-x2x" is forbidden: exceeded quota: compute'
    observed = []
    for body in plan(job).create:
        conditions = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                       "message": refusal}]  # fmt: skip
        shown_body = {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['kind']}"}}
        observed.append(
            observe_board(body["kind"], {**shown_body, "status": {"conditions": conditions}})
        )
    result = plan(job, observed)
    assert result.status is not None
    assert result.status["ready"] is False
    message = f"the API server refused the TensorBoard's pod: {refusal}"
    assert result.status["message"] == message
    assert [(e.reason, e.message) for e in result.events] == [
        ("FailedCreateTensorBoardPod", message)
    ]
    again = plan(
        view(spec({"logDir": LOG_DIR}), {**STARTED, "tensorboard": result.status}), observed
    )
    assert again.events == [], "reported once, as the status says it already"
    # The ReplicaSet's next try names another pod: the message follows, no new event.
    retried = [
        BoardObservation(o.kind, o.name, o.uid, o.owner_uid, o.digest, refused=refusal + "!")
        for o in observed
    ]
    status = {**STARTED, "tensorboard": result.status}
    later = plan(view(spec({"logDir": LOG_DIR}), status), retried)
    assert later.status is not None
    assert later.status["message"].endswith("!")
    assert later.events == []


def test_a_log_dir_on_no_volume_is_refused_with_the_reason() -> None:
    result = plan(view(spec({"logDir": "/logs"}), STARTED))
    assert result.create == []
    assert result.status is not None
    assert (
        "logDir /logs is on no volume of the worker-0 replica's tensorflow"
        in (result.status["message"])
    )


def test_a_url_needs_no_volume() -> None:
    result = plan(view(spec({"logDir": "gs://bucket/logs"}), STARTED))
    pod = result.create[0]["spec"]["template"]["spec"]
    assert pod["volumes"] == []
    assert pod["containers"][0]["volumeMounts"] == []


def test_no_image_anywhere_is_refused() -> None:
    job = view(spec({"logDir": LOG_DIR}), STARTED)
    result = plan_board(job, parse_spec("mnist", job.spec), STARTED, [], NOW, None)
    assert result.status == {
        "message": "no image: set spec.tensorboard.image, or the operator's --tensorboard-image"
    }


def test_the_url_carries_the_cluster_domain_when_the_operator_has_one() -> None:
    job = view(spec({"logDir": LOG_DIR}), STARTED)
    result = plan_board(
        job, parse_spec("mnist", job.spec), STARTED, [], NOW, IMAGE, "cluster.local"
    )
    assert result.status is not None
    assert result.status["url"] == "http://mnist-tensorboard.ml.svc.cluster.local:6006/"


def test_a_job_that_stops_asking_loses_its_tensorboard() -> None:
    observed = [shown(b) for b in plan(view(spec({"logDir": LOG_DIR}), STARTED)).create]
    result = plan(view(spec(), STARTED), observed)
    assert sorted(o.kind for o in result.delete) == ["Deployment", "NetworkPolicy", "Service"]
    assert result.status is None


def test_the_watch_files_a_board_under_the_job_its_label_names() -> None:
    """operator_main reads TensorBoards' Deployments and Services as it reads pods, by
    their own label: a job's pod is not a TensorBoard, nor a TensorBoard a job's child."""
    read = child_reader(functools.partial(observe_board, "Deployment"), LABEL_TENSORBOARD_OF)
    board = {
        "metadata": {
            "name": "mnist-tensorboard",
            "namespace": "ml",
            "uid": "uid-board",
            "labels": {LABEL_TENSORBOARD_OF: "mnist", LABEL_TENSORBOARD_DIGEST: "d1"},
        },
        "status": {"availableReplicas": 1},
    }
    entry = read(board)
    assert entry is not None
    uid, key, record = entry
    assert (uid, key, record.kind, record.digest, record.available) == (
        "uid-board",
        ("ml", "mnist"),
        "Deployment",
        "d1",
        True,
    )
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "labels": {LABEL_JOB_NAME: "mnist"},
        }
    }
    assert read(pod) is None
    assert child_reader(lambda body: body)(board) is None
