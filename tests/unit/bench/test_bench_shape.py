"""The benchmark's TFJobs, the children it expects of them, and the leader's exit."""

from __future__ import annotations

import pytest

# The benchmark is not an installed package: it runs from the repository root.
from bench.shape import (
    ShapeError,
    floor_objects,
    job_of_child,
    leader_exit_patch,
    parse_shape,
    tfjob,
)
from harness import kwok
from harness.operator_process import OperatorError, check_template


def test_default_shape_has_seven_replicas_led_by_the_chief() -> None:
    shape = parse_shape("chief=1,worker=4,ps=2")
    assert shape.as_dict() == {"Chief": 1, "Worker": 4, "PS": 2}
    assert shape.replicas_per_job == 7
    assert shape.leader_name("bench-00003") == "bench-00003-chief-0"
    assert shape.child_names("j") == [
        "j-chief-0",
        "j-worker-0",
        "j-worker-1",
        "j-worker-2",
        "j-worker-3",
        "j-ps-0",
        "j-ps-1",
    ]


def test_without_a_chief_worker_zero_leads() -> None:
    assert parse_shape("worker=2").leader_name("j") == "j-worker-0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chief=1,gpu=2", "'gpu=2' is not TYPE=COUNT"),
        ("chief", "'chief' is not TYPE=COUNT"),
        ("worker=x", "'x' is not a number"),
        ("worker=0", "worker needs at least 1 replica"),
        ("worker=1,worker=2", "worker is given twice"),
        ("chief=2,worker=1", "Chief"),
        ("ps=2", "PS"),
    ],
)
def test_bad_shapes_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ShapeError, match="replica shape") as error:
        parse_shape(text)
    assert message in str(error.value)


def test_tfjob_carries_the_api_version_and_cleans_running_pods() -> None:
    job = tfjob("kubeflow.org/v1", "bench-00000", parse_shape("worker=2"))
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["name"] == "tensorflow"


def test_floor_objects_are_the_operators_children_without_an_owner() -> None:
    shape = parse_shape("chief=1,worker=2")
    objects = list(floor_objects("ns", ["a", "b"], shape))
    assert len(objects) == 2 * 2 * shape.replicas_per_job
    kinds = [(path.rsplit("/", 1)[1], body["metadata"]["name"]) for path, body in objects]
    assert kinds[:3] == [
        ("services", "a-chief-0"),
        ("services", "a-worker-0"),
        ("services", "a-worker-1"),
    ]
    assert kinds[3] == ("pods", "a-chief-0")
    for path, body in objects:
        assert path.startswith("/api/v1/namespaces/ns/")
        assert "ownerReferences" not in body["metadata"]
        assert body["metadata"]["labels"]["tfjob.dev/job-name"] in ("a", "b")
    pod = next(body for path, body in objects if path.endswith("/pods"))
    env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert "TF_CONFIG" in env


def test_job_of_child_strips_type_and_index() -> None:
    assert job_of_child("bench-00042-worker-3") == "bench-00042"
    assert job_of_child("bench-00042-ps-10") == "bench-00042"


def test_leader_exit_patch_terminates_every_container_with_code_zero() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "tensorflow",
                    "image": "x",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
            ],
        }
    }
    patch = leader_exit_patch(pod, "2026-01-01T00:01:00Z")["status"]
    assert patch["phase"] == "Succeeded"
    (container,) = patch["containerStatuses"]
    assert container["state"] == {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:01:00Z",
        }
    }
    assert container["ready"] is False
    statuses = {c["type"]: c["status"] for c in patch["conditions"]}
    assert statuses == {"Initialized": "True", "Ready": "False", "ContainersReady": "False"}


def test_kwok_nodes_have_their_own_pod_range() -> None:
    first, second = kwok.node(0), kwok.node(1)
    assert first["metadata"]["annotations"] == {kwok.NODE_ANNOTATION: "fake"}
    assert first["spec"]["podCIDR"] != second["spec"]["podCIDR"]
    with pytest.raises(ValueError, match="out of range"):
        kwok.node(64)
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "spec": {}}
    assert kwok.schedulable(ready)
    tainted = {**ready, "spec": {"taints": [{"key": "node.kubernetes.io/not-ready"}]}}
    assert not kwok.schedulable(tainted)


def test_operator_command_placeholders_are_checked() -> None:
    words = check_template("op --kubeconfig {kubeconfig} --port={metrics_port}")
    assert words == ["op", "--kubeconfig", "{kubeconfig}", "--port={metrics_port}"]
    with pytest.raises(OperatorError, match=r"unknown placeholder \{kube_config\}"):
        check_template("op --kubeconfig {kube_config}")
    with pytest.raises(OperatorError, match="empty"):
        check_template("  ")
