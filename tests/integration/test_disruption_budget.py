"""A TFJob's PodDisruptionBudget against the real API server, its disruption controller
and the Eviction API a node drain uses: while the job runs, a training pod's eviction is
refused and the evaluator's is not; once the job is suspended, the budget is gone and
nothing is held back."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.builders import shell_replica, tfjob
from support.tfjobs import TFJobs
from support.waiting import wait_until

from tfjob_operator.integrations.disruption import ANNOTATION

SLEEP = "sleep 3600"


def evict(core_v1: client.CoreV1Api, namespace: str, pod: str) -> ApiException | None:
    """The Eviction API's answer for `pod`: None if it was evicted."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    try:
        core_v1.create_namespaced_pod_eviction(pod, namespace, body)
    except ApiException as refused:
        return refused
    return None


def budget(policy: client.PolicyV1Api, namespace: str) -> Any:
    try:
        return policy.read_namespaced_pod_disruption_budget("drained-training", namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_a_drain_waits_for_a_running_job_that_asks_for_a_budget(
    tfjobs: TFJobs, core_v1: client.CoreV1Api, namespace: str
) -> None:
    policy = client.PolicyV1Api(core_v1.api_client)
    job = tfjob("drained", {"Worker": shell_replica(SLEEP, 2), "Evaluator": shell_replica(SLEEP)})
    job["metadata"]["annotations"] = {ANNOTATION: "true"}
    tfjobs.create(job)
    tfjobs.wait_state("drained", "Running", 120)
    # The disruption controller counts the two workers (not the evaluator) as healthy.
    counted = wait_until(
        lambda: budget(policy, namespace),
        60,
        lambda found: (
            "the budget to count the job's two workers; its status: "
            f"{found.status if found else 'no budget'}\n{tfjobs.describe('drained')}"
        ),
        until=lambda found: (
            found is not None
            and found.status is not None
            and found.status.observed_generation == found.metadata.generation
            and found.status.current_healthy == 2
        ),
    )
    assert counted.status.disruptions_allowed == 0
    refused = evict(core_v1, namespace, "drained-worker-0")
    assert refused is not None, "a training pod must not be evicted while the job runs"
    assert refused.status == 429
    assert "disruption budget" in str(refused.body)
    assert evict(core_v1, namespace, "drained-evaluator-0") is None, "the evaluator is not held"

    tfjobs.patch_spec("drained", {"runPolicy": {"suspend": True}})
    wait_until(lambda: budget(policy, namespace) is None, 60, "the suspended job's budget to go")
    events = tfjobs.wait_events(
        "drained",
        ["SuccessfulCreatePodDisruptionBudget", "SuccessfulDeletePodDisruptionBudget"],
    )
    deleted = [e["message"] for e in events if e["reason"] == "SuccessfulDeletePodDisruptionBudget"]
    assert deleted == ["Deleted PodDisruptionBudget drained-training: the TFJob is suspended"]


@pytest.mark.parametrize("value", [None, "false"])
def test_a_job_that_does_not_ask_gets_no_budget(
    value: str | None, tfjobs: TFJobs, core_v1: client.CoreV1Api, namespace: str
) -> None:
    job = tfjob("drained", {"Worker": shell_replica(SLEEP)})
    if value is not None:
        job["metadata"]["annotations"] = {ANNOTATION: value}
    tfjobs.create(job)
    tfjobs.wait_state("drained", "Running", 120)
    assert budget(client.PolicyV1Api(core_v1.api_client), namespace) is None
    assert evict(core_v1, namespace, "drained-worker-0") is None
