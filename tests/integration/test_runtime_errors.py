"""A TFJob that cannot run says why in its status, with the API server's or the kubelet's
own words, and stops saying it once the cause is gone.

Against the local cluster's real API server (its ServiceAccount and ResourceQuota admission,
its Pod validation) and kubelet (image pulls, config errors, restarts). The session's
operator runs with --invalid-pod-grace-seconds=INVALID_POD_GRACE_SECONDS.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from support.builders import shell_replica, tfjob
from support.cluster import Kubectl
from support.fixtures import INVALID_POD_GRACE_SECONDS
from support.tfjobs import TFJobs, condition, find_condition

from harness.operator_process import OperatorProcess
from tfjob_operator.timeutil import from_rfc3339

SLEEP = "sleep 3600"
#: The operator reports a refused pod within this long (its first retry is 2 s later).
REPORTED_WITHIN = 10.0


def wait_running_reason(
    tfjobs: TFJobs, name: str, accept: Callable[[str], bool], timeout: float
) -> dict[str, Any]:
    """The job once its Running condition's reason passes `accept`."""
    return tfjobs.wait_for(
        name,
        lambda job: accept(str((find_condition(job, "Running") or {}).get("reason", ""))),
        "the Running condition's reason",
        timeout,
    )


def reported_after_the_kubelet(
    tfjobs: TFJobs, name: str, reasons: tuple[str, ...], kubelet_timeout: float
) -> dict[str, Any]:
    """The job once its Running condition gives one of `reasons`, which must be within
    REPORTED_WITHIN of the kubelet first reporting one of them in the pod's status."""

    def waiting(pods: list[dict[str, Any]]) -> bool:
        return any(
            (c.get("state") or {}).get("waiting", {}).get("reason") in reasons
            for pod in pods
            for c in (pod.get("status") or {}).get("containerStatuses") or []
        )

    tfjobs.wait_pods(
        name, waiting, f"a container waiting with {' or '.join(reasons)}", kubelet_timeout
    )
    return wait_running_reason(tfjobs, name, lambda r: r in reasons, REPORTED_WITHIN)


def running(job: dict[str, Any]) -> dict[str, Any]:
    return condition(job, "Running")


def warning_events(tfjobs: TFJobs, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in tfjobs.events(name) if e["reason"] == reason]


def test_a_missing_service_account_is_named_and_the_job_runs_once_it_exists(
    tfjobs: TFJobs, core_v1: Any, kubectl: Kubectl, namespace: str
) -> None:
    worker = shell_replica(SLEEP)
    worker["template"]["spec"]["serviceAccountName"] = "trainer"
    tfjobs.create(tfjob("sa", {"Worker": worker}))
    job = wait_running_reason(tfjobs, "sa", lambda r: r == "FailedCreatePod", REPORTED_WITHIN)
    message = running(job)["message"]
    assert message.startswith("worker-0: the API server refused its pod (403 Forbidden): ")
    assert 'serviceaccount "trainer" not found' in message
    assert "fails at" not in message  # an administrator can fix it: the job waits
    row = kubectl("get", "tfj", "sa", "-n", namespace).stdout.splitlines()[1].split()
    assert row[:3] == ["sa", "Created", "FailedCreatePod"]

    core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": "trainer"}})
    job = tfjobs.wait_state("sa", "Running", 60)
    assert running(job)["reason"] == "TFJobRunning"
    # Every retry counted up one Event instead of adding one.
    (event,) = warning_events(tfjobs, "sa", "FailedCreatePod")
    assert event["type"] == "Warning"
    assert event["count"] >= 1


def test_a_quota_keeps_the_job_waiting_until_it_allows_its_pods(
    tfjobs: TFJobs, core_v1: Any, namespace: str
) -> None:
    quota = {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}
    core_v1.create_namespaced_resource_quota(namespace, quota)
    tfjobs.poll(
        "quota",
        lambda: core_v1.read_namespaced_resource_quota("pods", namespace).status.hard,
        bool,
        "the quota controller to fill the quota's status",
        30,
    )
    tfjobs.create(tfjob("quota", {"Worker": shell_replica(SLEEP, 2)}))
    job = wait_running_reason(tfjobs, "quota", lambda r: r == "FailedCreatePod", REPORTED_WITHIN)
    message = running(job)["message"]
    # Whichever pod the API server admitted second is refused.
    assert re.match(r"worker-[01]: the API server refused its pod \(403 Forbidden\): ", message)
    assert "exceeded quota: pods" in message
    # Past the grace of an invalid pod, a forbidden one still waits.
    time.sleep(INVALID_POD_GRACE_SECONDS + 2)
    assert tfjobs.get("quota")["status"]["state"] == "Created"

    core_v1.delete_namespaced_resource_quota("pods", namespace)
    job = tfjobs.wait_state("quota", "Running", 90)
    assert [p["metadata"]["name"] for p in tfjobs.pods("quota")] == [
        "quota-worker-0",
        "quota-worker-1",
    ]


def test_a_pod_refused_as_invalid_fails_the_job_after_the_grace_period(
    tfjobs: TFJobs, operator: OperatorProcess, namespace: str
) -> None:
    # The CRD cannot know a label value is invalid; the Pod API refuses it (422).
    worker = shell_replica(SLEEP)
    worker["template"]["metadata"] = {"labels": {"team": "not a label value"}}
    tfjobs.create(tfjob("invalid", {"Worker": worker}))
    job = wait_running_reason(tfjobs, "invalid", lambda r: r == "FailedCreatePod", REPORTED_WITHIN)
    message = running(job)["message"]
    assert message.startswith("worker-0: the API server refused its pod (422 Invalid): ")
    assert "metadata.labels: Invalid value" in message
    assert "unless its spec is changed" in message

    job = tfjobs.wait_state("invalid", "Failed", INVALID_POD_GRACE_SECONDS + 15)
    failed = condition(job, "Failed")
    assert failed["reason"] == "FailedCreatePod"
    assert failed["message"].endswith(
        f"it was still refused after {INVALID_POD_GRACE_SECONDS:.0f}s"
    )
    assert tfjobs.pods("invalid") == []
    # One Event for the refused pod, counting its retries, beside the one of the job's
    # failure; in the log, a WARNING line for each (the job and the replica as fields), no
    # traceback.
    events = warning_events(tfjobs, "invalid", "FailedCreatePod")
    (failure,) = [e for e in events if "still refused" in e["message"]]
    (refused,) = [e for e in events if e is not failure]
    assert refused["count"] >= 2
    log = operator.log_path.read_text()
    about = [line for line in log.splitlines() if f"[namespace={namespace} name=invalid " in line]
    assert len(about) == 2, about
    assert all(" WARNING " in line for line in about), about
    assert "retrying in" in about[0]
    assert about[0].endswith(" replica=worker-0]")
    assert "still refused" in about[1]
    assert f"reconcile of tfjob {namespace}/invalid failed" not in log


def test_a_restart_during_the_grace_of_an_invalid_pod_does_not_start_it_again(
    tfjobs: TFJobs, operator: OperatorProcess
) -> None:
    """The grace counts from the refusal the status records (its Running condition's
    lastTransitionTime), not from the first refusal a new operator process sees."""
    worker = shell_replica(SLEEP)
    worker["template"]["metadata"] = {"labels": {"team": "not a label value"}}
    tfjobs.create(tfjob("regrace", {"Worker": worker}))
    job = wait_running_reason(tfjobs, "regrace", lambda r: r == "FailedCreatePod", REPORTED_WITHIN)
    began = from_rfc3339(running(job)["lastTransitionTime"])
    operator.stop()
    time.sleep(INVALID_POD_GRACE_SECONDS * 0.6)
    operator.run()
    restarted = datetime.now(UTC)
    job = tfjobs.wait_state("regrace", "Failed", INVALID_POD_GRACE_SECONDS + 15)
    failed = from_rfc3339(condition(job, "Failed")["lastTransitionTime"])
    grace = timedelta(seconds=INVALID_POD_GRACE_SECONDS)
    # A grace started again by the restart would end a grace after it.
    assert restarted > began + grace * 0.6
    assert failed < restarted + grace - timedelta(seconds=2)
    assert failed - began <= grace + timedelta(seconds=3)


def test_a_missing_config_map_is_named_and_the_job_runs_once_it_exists(
    tfjobs: TFJobs, core_v1: Any, namespace: str
) -> None:
    worker = shell_replica(SLEEP)
    reference = {"configMapKeyRef": {"name": "settings", "key": "epochs"}}
    worker["template"]["spec"]["containers"][0]["env"].append(
        {"name": "EPOCHS", "valueFrom": reference}
    )
    tfjobs.create(tfjob("config", {"Worker": worker}))
    job = reported_after_the_kubelet(tfjobs, "config", ("CreateContainerConfigError",), 60)
    message = running(job)["message"]
    assert message.startswith("worker-0 is pending: CreateContainerConfigError: ")
    assert 'configmap "settings" not found' in message

    core_v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"epochs": "3"}}
    )
    job = tfjobs.wait_state("config", "Running", 90)
    assert running(job)["reason"] == "TFJobRunning"


def test_a_crash_looping_replica_is_named(tfjobs: TFJobs) -> None:
    tfjobs.create(tfjob("crash", {"Worker": shell_replica("sleep 1; exit 3", policy="OnFailure")}))
    job = reported_after_the_kubelet(tfjobs, "crash", ("CrashLoopBackOff",), 60)
    message = running(job)["message"]
    assert message.startswith("worker-0 is waiting: CrashLoopBackOff: back-off ")
    assert job["status"]["state"] != "Running"


def test_an_unpullable_image_is_named_and_its_events_are_aggregated(
    tfjobs: TFJobs, kubectl: Kubectl, namespace: str
) -> None:
    worker = shell_replica(SLEEP)
    # Nothing listens on the discard port: every pull fails at once.
    worker["template"]["spec"]["containers"][0]["image"] = "127.0.0.1:9/missing/trainer:1"
    tfjobs.create(tfjob("pull", {"Worker": worker}))
    pulling = ("ErrImagePull", "ImagePullBackOff")
    job = reported_after_the_kubelet(tfjobs, "pull", pulling, 60)
    assert "127.0.0.1:9/missing/trainer:1" in running(job)["message"]
    row = kubectl("get", "tfj", "pull", "-n", namespace).stdout.splitlines()[1].split()
    assert row[1] == "Created"
    assert row[2] in pulling

    # The kubelet alternates the two reasons at every back-off, with messages that differ:
    # each reason stays one Event of the replica, counted up.
    def pull_events() -> list[dict[str, Any]]:
        return [e for e in tfjobs.events("pull") if e["reason"] in pulling]

    events = tfjobs.poll(
        "pull",
        pull_events,
        lambda found: sum(e.get("count") or 1 for e in found) >= 3,
        "three image pull events",
        90,
    )
    assert len(events) <= len(pulling)
