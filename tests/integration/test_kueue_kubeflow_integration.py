"""Kueue with its own Kubeflow integration on: kubeflow.org TFJobs keep Kueue's route.

Clusters that still enable `kubeflow.org/tfjob` in Kueue's integrations (off by default since
Kueue v0.17, and refused beside `TFJob.v1.kubeflow.org` among its external frameworks) keep
what they had: Kueue's webhook suspends the job at creation, Kueue makes its Workload and
resumes it once admitted. The operator sees that Workload and makes none of its own.
"""

from __future__ import annotations

from support.cluster import Kubectl
from support.kueue import (
    made_by_operator,
    queued_tfjob,
    suspended,
    suspended_message,
    workload_of,
)
from support.tfjobs import TFJobs, condition

#: support/kueue.py's `kueue` starts Kueue with its Kubeflow integration on for this module.
KUEUE_KUBEFLOW_INTEGRATION = True


def test_kueue_makes_the_one_workload_of_each_job_and_runs_them_one_after_the_other(
    kubeflow_jobs: TFJobs, kubectl: Kubectl, queue: str
) -> None:
    namespace = kubeflow_jobs.namespace
    first = kubeflow_jobs.create(queued_tfjob("first", queue, "600m"))
    assert suspended(first), "Kueue's webhook suspends the job at creation"
    kubeflow_jobs.wait_state("first", "Running", 60)
    workload = workload_of(kubectl, namespace, first["metadata"]["uid"])
    assert workload is not None
    assert not made_by_operator(workload), "Kueue's own"

    second = kubeflow_jobs.create(queued_tfjob("second", queue, "600m"))
    waiting = kubeflow_jobs.wait_for(
        "second", lambda job: "Kueue: " in suspended_message(job), "Kueue's reason", 30
    )
    assert suspended(waiting)
    assert f"queued in Kueue's LocalQueue {queue}" in suspended_message(waiting)
    assert kubeflow_jobs.pods("second") == []

    kubectl.tell_to_finish(namespace, "first-worker-0")
    kubeflow_jobs.wait_state("first", "Succeeded", 60)
    resumed = kubeflow_jobs.wait_state("second", "Running", 60)
    assert not suspended(resumed)
    assert condition(resumed, "Suspended")["status"] == "False"
    kubectl.tell_to_finish(namespace, "second-worker-0")
    kubeflow_jobs.wait_state("second", "Succeeded", 60)
    for job in (first, second):
        found = workload_of(kubectl, namespace, job["metadata"]["uid"])  # one, or it fails
        assert found is not None
        assert not made_by_operator(found)
