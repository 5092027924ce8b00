"""Kubeflow's own Python SDK (kubeflow-training, from PyPI) against `tfjob-operator run
--kubeflow`, unchanged: every TrainingClient method that applies to a TFJob, and a gang
larger than the job, which Kubeflow accepts and leaves waiting until `update_job` lowers
it, with each gang scheduler.

The replicas run small shell commands in the `tensorflow` container, as in
test_kubeflow.py; the SDK's objects are built with its own models.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1SchedulingPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    TrainingClient,
)
from kubernetes import client
from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec
from support.builders import SHELL_IMAGE
from support.waiting import wait_until

from harness.operator_process import OperatorProcess
from tfjob_localcluster.addons.coscheduling import SCHEDULER_NAME as SCHEDULER_PLUGINS

#: Each replica prints a line naming itself, then worker 0 (the master without a chief)
#: succeeds while the others wait to be cleaned up.
SCRIPT = (
    'echo "replica $HOSTNAME up"; '
    'if [ "${HOSTNAME##*-}" = 0 ]; then sleep 2; echo done; exit 0; fi; sleep 3600'
)
TIMEOUT = 90


@pytest.fixture
def sdk(kubeflow_operator: OperatorProcess, kubeconfig: str, namespace: str) -> TrainingClient:
    return TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="TFJob")


def replica(replicas: int, scheduler: str | None = None) -> KubeflowOrgV1ReplicaSpec:
    container = V1Container(name="tensorflow", image=SHELL_IMAGE, command=["sh", "-c", SCRIPT])
    pod = V1PodSpec(
        containers=[container], scheduler_name=scheduler, termination_grace_period_seconds=1
    )
    return KubeflowOrgV1ReplicaSpec(
        replicas=replicas, restart_policy="Never", template=V1PodTemplateSpec(spec=pod)
    )


def sdk_tfjob(
    name: str, replicas: int, scheduler: str | None = None, min_available: int | None = None
) -> KubeflowOrgV1TFJob:
    run_policy = KubeflowOrgV1RunPolicy(clean_pod_policy="None")
    if min_available is not None:
        run_policy.scheduling_policy = KubeflowOrgV1SchedulingPolicy(min_available=min_available)
    return KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=V1ObjectMeta(name=name),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=run_policy, tf_replica_specs={"Worker": replica(replicas, scheduler)}
        ),
    )


def condition_types(sdk: TrainingClient, name: str) -> list[tuple[str, str]]:
    return [(c.type, c.status) for c in sdk.get_job_conditions(name)]


def assert_succeeded_as_kubeflow_reports_it(sdk: TrainingClient, name: str) -> None:
    """What Kubeflow's own checks read: Created, then Succeeded, and no longer Running."""
    assert sdk.is_job_created(name)
    assert sdk.is_job_succeeded(name)
    assert not sdk.is_job_running(name)
    assert not sdk.is_job_failed(name)
    assert not sdk.is_job_restarting(name)
    conditions = condition_types(sdk, name)
    assert conditions == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]


def test_every_training_client_method_for_a_tfjob(sdk: TrainingClient, namespace: str) -> None:
    sdk.create_job(sdk_tfjob("mnist", replicas=2))
    created = sdk.wait_for_job_conditions(
        "mnist", expected_conditions={"Created"}, wait_timeout=TIMEOUT, polling_interval=1
    )
    assert created.metadata.name == "mnist"
    assert [job.metadata.name for job in sdk.list_jobs()] == ["mnist"]
    assert sdk.get_job("mnist").spec.tf_replica_specs["Worker"].replicas == 2

    sdk.wait_for_job_conditions(
        "mnist", expected_conditions={"Running", "Succeeded"}, wait_timeout=TIMEOUT,
        polling_interval=1,
    )  # fmt: skip
    assert sdk.get_job_pod_names("mnist") == ["mnist-worker-0", "mnist-worker-1"]
    assert sdk.get_job_pod_names("mnist", is_master=True) == ["mnist-worker-0"]
    assert sdk.get_job_pod_names("mnist", replica_type="worker", replica_index=1) == [
        "mnist-worker-1"
    ]

    sdk.wait_for_job_conditions("mnist", wait_timeout=TIMEOUT, polling_interval=1)
    assert_succeeded_as_kubeflow_reports_it(sdk, "mnist")
    # Logs of the master replica, then of all replicas; followed until the pods end.
    master, _ = sdk.get_job_logs("mnist")
    assert master["mnist-worker-0"].splitlines() == ["replica mnist-worker-0 up", "done"]
    every, _ = sdk.get_job_logs("mnist", is_master=False)
    assert every["mnist-worker-1"].splitlines() == ["replica mnist-worker-1 up"]
    followed, _ = sdk.get_job_logs("mnist", follow=True)
    # The SDK joins the lines of a followed log without their newlines.
    assert followed["mnist-worker-0"] == "replica mnist-worker-0 updone"

    sdk.delete_job("mnist")
    wait_until(
        sdk.list_jobs,
        TIMEOUT,
        "the TFJob to be deleted",
        until=lambda jobs: not jobs,
        interval=0.5,
    )


@pytest.fixture(params=["scheduler-plugins", "volcano"])
def gang_scheduler(request: pytest.FixtureRequest) -> Iterator[str]:
    """A gang scheduler running, under the name a Kubeflow user's template gives it."""
    if request.param == "volcano":
        request.getfixturevalue("volcano")
        yield "volcano"
    else:
        request.getfixturevalue("coscheduling")
        yield SCHEDULER_PLUGINS


def test_a_gang_larger_than_the_job_waits_until_update_job_lowers_it(
    sdk: TrainingClient, gang_scheduler: str
) -> None:
    """Kubeflow's SDK test of gang scheduling: accepted, Created and not Running, then run
    once `update_job` makes the gang fit."""
    sdk.create_job(sdk_tfjob("gang", 1, gang_scheduler, min_available=10))
    sdk.wait_for_job_conditions(
        "gang", expected_conditions={"Created"}, wait_timeout=TIMEOUT, polling_interval=1
    )
    for _ in range(3):
        assert sdk.is_job_created("gang")
        assert not sdk.is_job_running("gang")
        time.sleep(2)
    (running,) = [c for c in sdk.get_job_conditions("gang") if c.type == "Running"]
    assert running.reason == "GangUnschedulable"
    assert "minAvailable is 10, more than the job's 1 replicas" in running.message

    sdk.update_job(sdk_tfjob("gang", 1, gang_scheduler, min_available=1), "gang")
    sdk.wait_for_job_conditions("gang", wait_timeout=TIMEOUT, polling_interval=1)
    assert_succeeded_as_kubeflow_reports_it(sdk, "gang")


def test_a_volcano_gang_that_names_no_queue_is_in_volcanos_default_queue(
    sdk: TrainingClient, volcano: Any, k8s_client: Any, namespace: str
) -> None:
    """As Kubeflow's operator (and Volcano's webhook) sets it."""
    sdk.create_job(sdk_tfjob("queued", 1, "volcano"))
    groups = client.CustomObjectsApi(k8s_client)

    def pod_group() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = groups.get_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", namespace, "podgroups", "queued"
            )
        except client.ApiException as error:
            if error.status != 404:
                raise
            return None
        return found

    group = wait_until(pod_group, TIMEOUT, "the job's Volcano PodGroup")
    assert group["spec"]["queue"] == "default"
    sdk.wait_for_job_conditions("queued", wait_timeout=TIMEOUT, polling_interval=1)
    assert_succeeded_as_kubeflow_reports_it(sdk, "queued")
