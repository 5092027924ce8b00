"""Reading a pod's outcome the way the kubelet reports it."""

from __future__ import annotations

from typing import Any

from tfjob_operator.observe import Failure, observe_pod


def body(phase: str, main: dict[str, Any] | None = None, **status: object) -> dict[str, Any]:
    containers = [{"name": "sidecar", "state": {"running": {}}}]
    if main is not None:
        containers.append({"name": "tensorflow", **main})
    return {
        "metadata": {
            "name": "mnist-worker-0",
            "uid": "u",
            "labels": {"tfjob.dev/replica-type": "worker", "tfjob.dev/replica-index": "0"},
        },
        "status": {"phase": phase, "containerStatuses": containers, **status},
    }


def test_exit_code_comes_from_the_tensorflow_container() -> None:
    observed = observe_pod(
        body("Failed", {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}})
    )
    assert observed.failure == Failure(137, "OOMKilled", "", disrupted=False)
    assert observed.failure.describe() == "exited with code 137 (OOMKilled)"
    assert observed.replica is not None
    assert observed.replica.key == "worker-0"


def test_evicted_pod_is_a_disruption() -> None:
    observed = observe_pod(body("Failed", None, reason="Evicted", message="low on memory"))
    assert observed.failure is not None
    assert observed.failure.disrupted
    assert observed.failure.describe() == "was disrupted (Evicted): low on memory"


def test_a_pod_evicted_from_a_lost_node_names_the_node() -> None:
    """The taint manager's message names the taint, not the node."""
    lost = body("Running", {"state": {"running": {}}})
    lost["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    lost["spec"] = {"nodeName": "node-a"}
    lost["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint key "
            "node.kubernetes.io/unreachable",
        }
    ]
    failure = observe_pod(lost).failure
    assert failure is not None
    assert failure.describe() == (
        "was disrupted (DeletionByTaintManager) on node node-a: Taint manager: deleting due "
        "to NoExecute taint key node.kubernetes.io/unreachable"
    )


def test_exit_zero_under_restart_policy_always_counts_as_success() -> None:
    main = {
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 0}},
        "restartCount": 1,
    }
    observed = observe_pod(body("Running", main))
    assert observed.succeeded
    assert observed.container_restarts == 1


def test_image_pull_error_is_the_waiting_reason() -> None:
    main = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
    observed = observe_pod(body("Pending", main))
    assert (observed.waiting_reason, observed.waiting_message) == ("ImagePullBackOff", "not found")


def test_a_sidecar_or_init_container_that_cannot_start_is_named_in_the_waiting_message() -> None:
    config = {"reason": "CreateContainerConfigError", "message": 'secret "token" not found'}
    pod = body("Pending", {"state": {"waiting": {"reason": "PodInitializing"}}})
    pod["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"waiting": config}}]
    observed = observe_pod(pod)
    assert observed.waiting_reason == "CreateContainerConfigError"
    assert observed.waiting_message == 'container fetch: secret "token" not found'

    running = body("Running", {"state": {"running": {}}})
    running["status"]["containerStatuses"].append(
        {"name": "proxy", "state": {"waiting": {"reason": "RunContainerError"}}}
    )
    observed = observe_pod(running)
    assert (observed.waiting_reason, observed.waiting_message) == (
        "RunContainerError",
        "container proxy",
    )
    assert not observed.running


def test_an_init_container_that_exits_non_zero_fails_the_pod_with_its_words() -> None:
    """uv, installing a function's packages, finds no index: the pod fails before its main
    container ran; the failure is the init container's exit, not a disruption."""
    pod = body("Failed", {"state": {"waiting": {"reason": "PodInitializing"}}})
    said = "Resolved 0 packages\nerror: Failed to fetch: `http://127.0.0.1:9/simple/einops/`"
    pod["status"]["initContainerStatuses"] = [
        {"name": "install-packages", "state": {"terminated": {"exitCode": 2, "message": said}}}
    ]
    failure = observe_pod(pod).failure
    assert failure is not None
    assert (failure.exit_code, failure.disrupted) == (2, False)
    assert failure.describe() == (
        "init container install-packages exited with code 2: Resolved 0 packages "
        "error: Failed to fetch: `http://127.0.0.1:9/simple/einops/`"
    )


def exited_one(finished: str = "2026-11-25T22:38:03Z") -> dict[str, Any]:
    return {"state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}}}


def test_a_container_that_exited_under_restart_policy_never_has_failed_before_the_phase_moves() -> (
    None
):
    """The kubelet reports the exit code first, the phase once the sandbox is gone."""
    reported = body("Running", exited_one())
    reported["spec"] = {"restartPolicy": "Never", "nodeName": "node-a"}
    assert observe_pod(reported).failure == Failure(1, "Error", "", disrupted=False)
    # Under OnFailure the kubelet runs it again in place: not a failure of the replica.
    reported["spec"]["restartPolicy"] = "OnFailure"
    assert observe_pod(reported).failure is None


def taint_evicted(pod: dict[str, Any], at: str) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = at
    pod["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "lastTransitionTime": at,
        }
    ]
    return pod


def test_an_exit_before_the_node_was_lost_decides_and_a_later_eviction_does_not() -> None:
    """Its exit code was reported, then the node was lost before the phase moved, and the
    pod was evicted: it had failed by itself (a permanent exit stays permanent)."""
    failed_first = taint_evicted(body("Running", exited_one()), "2026-11-25T22:38:39Z")
    failed_first["spec"] = {"restartPolicy": "Never", "nodeName": "node-a"}
    assert observe_pod(failed_first).failure == Failure(1, "Error", "", disrupted=False)
    # Killed with the node: the kubelet reports the exit once the node is back, after the
    # eviction; the disruption decides.
    killed = taint_evicted(
        body("Failed", exited_one("2026-11-25T22:39:10Z")), "2026-11-25T22:38:39Z"
    )
    killed["spec"] = {"restartPolicy": "Never", "nodeName": "node-a"}
    failure = observe_pod(killed).failure
    assert failure is not None
    assert failure.disrupted
    assert failure.reason == "DeletionByTaintManager"


def test_a_replica_whose_container_failed_is_no_longer_active_for_the_clean_up() -> None:
    """cleanPodPolicy Running deletes active pods: a failed chief's stays, for its log."""
    reported = body("Running", exited_one())
    reported["spec"] = {"restartPolicy": "Never"}
    observed = observe_pod(reported)
    assert not observed.active
    assert not observed.running
