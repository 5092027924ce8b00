"""Kueue's MultiKueue runs TFJobs of both APIs submitted to a manager cluster on workers.

End to end: real TensorFlow in containers, on local clusters.

Three clusters on this machine (support/multikueue.py): the manager, a control plane
alone, and two workers with a node each; Kueue (KUEUE_VERSION) beside each, MultiKueue on
the manager with Kueue's generic adapter for external frameworks, the operator on all
three. A job submitted to the manager runs on a worker and its status comes back; the
manager's copy never has a pod. Real training (the MWMS example) on one; shell jobs show
the dispatch over both workers' quotas and a lost worker's job dispatched again.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.builders import UNTIL_TOLD, shell_replica, tfjob
from support.examples import example
from support.kueue import QUEUE_LABEL
from support.multikueue import (
    DISPATCHED,
    LOST_AFTER,
    TRAINING,
    WORKER_A,
    WORKER_B,
    WORKER_QUOTA,
    Site,
    cluster_of,
    manager_workload,
    queues_in,
)
from support.tfjobs import TFJobs, find_condition
from support.waiting import wait_until

from tfjob_operator.api import MULTIKUEUE
from tfjob_operator.client import TFJobClient
from tfjob_operator.client.results import results_in

log = logging.getLogger(__name__)

#: The MWMS example's training, on a machine busy with three clusters.
TRAINING_TIMEOUT = 600
#: A shell job's run, dispatch included.
SHELL_TIMEOUT = 120
#: The CLI as installed: the console script beside this Python.
CLI = str(Path(sys.executable).parent / "tfjob-operator")

Obj = dict[str, Any]


@pytest.fixture
def sites(manager: Site, worker_a: Site, worker_b: Site, namespace: str) -> dict[str, Site]:
    """The three clusters, the test's namespace and its LocalQueues on each."""
    queues_in(namespace, manager, worker_a, worker_b)
    return {"manager": manager, WORKER_A: worker_a, WORKER_B: worker_b}


def shell_job(name: str, script: str, queue: str, api_version: str = "tfjob.dev/v1") -> Obj:
    """A job of one worker asking for a worker's whole quota, managed by MultiKueue: in
    spec.managedBy for tfjob.dev, in Kubeflow's runPolicy.managedBy for kubeflow.org."""
    worker = shell_replica(script)
    worker["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": WORKER_QUOTA}}
    body = tfjob(name, {"Worker": worker})
    body["apiVersion"] = api_version
    body["metadata"]["labels"] = {QUEUE_LABEL: queue}
    if api_version == "kubeflow.org/v1":
        body["spec"]["runPolicy"] = {"managedBy": MULTIKUEUE}
    else:
        body["spec"]["managedBy"] = MULTIKUEUE
    return body


def dispatched_to(manager: TFJobs, site: Site, job: Obj, timeout: float = 60) -> str:
    """The worker cluster MultiKueue dispatched `job` to, once it has; on timeout, the job
    and what Kueue says on the manager (its Workload, queues and checks)."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]

    def why(_: Obj | None) -> str:
        kueue = site.kubectl(
            "get", "workloads,clusterqueues,admissionchecks,multikueueclusters", "-A",
            "-o", "yaml", check=False,
        ).stdout  # fmt: skip
        return f"TFJob {name} dispatched to a worker\n{manager.describe(name)}\n{kueue}"

    workload = wait_until(
        lambda: manager_workload(site, manager.namespace, uid),
        timeout,
        why,
        until=lambda found: cluster_of(found) is not None,
    )
    cluster = cluster_of(workload)
    assert cluster is not None
    return cluster


def no_pods_on_the_manager(manager: Site, namespace: str) -> None:
    pods = manager.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.split()
    assert pods == [], f"the manager ran pods: {pods}"


def streamed_log(site: Site, namespace: str, pod: str) -> subprocess.Popen[str]:
    """`kubectl logs -f` of the pod's training container on `site`, once it runs: the
    whole log, read to its end even after MultiKueue deletes the finished copy."""
    TFJobs(site.kubeconfig, namespace).poll(
        pod,
        lambda: site.kubectl("get", "pod", "-n", namespace, pod, check=False).stdout,
        lambda shown: "Running" in shown,
        f"pod {pod} running on {site.name}",
        TRAINING_TIMEOUT,
    )
    return subprocess.Popen(
        [str(site.kubectl.path), f"--kubeconfig={site.kubeconfig}", "logs", "-f", "-n",
         namespace, pod, "-c", "tensorflow"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_both_apis_run_on_a_worker_and_succeed_on_the_manager(
    sites: dict[str, Site], namespace: str
) -> None:
    """A Kubeflow job (runPolicy.managedBy, Kubeflow's YAML unchanged) runs on either
    worker, and the MWMS example (tfjob.dev, spec.managedBy) trains on worker-a, the one
    its queue dispatches to. Both reach Succeeded on the manager, with the worker's replica
    statuses, and MultiKueue deletes the worker's copy after; the client on the manager
    says where each ran."""
    manager, worker_a = sites["manager"], sites[WORKER_A]
    on_manager = TFJobs(manager.kubeconfig, namespace)
    kubeflow_on_manager = TFJobs(manager.kubeconfig, namespace, group="kubeflow.org")
    kubeflow = kubeflow_on_manager.create(
        shell_job("kubeflow-shell", UNTIL_TOLD, DISPATCHED, "kubeflow.org/v1")
    )
    # Kueue's generic adapter reads spec.managedBy: the operator sets it from Kubeflow's.
    kubeflow_on_manager.wait_for(
        "kubeflow-shell",
        lambda job: job["spec"].get("managedBy") == MULTIKUEUE,
        "spec.managedBy mirrored from runPolicy.managedBy",
        30,
    )
    shell_cluster = dispatched_to(kubeflow_on_manager, manager, kubeflow)
    assert shell_cluster in (WORKER_A, WORKER_B)
    copies = TFJobs(sites[shell_cluster].kubeconfig, namespace, group="kubeflow.org")
    copy = copies.wait_state("kubeflow-shell", "Running", SHELL_TIMEOUT)
    assert copy["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"]
    assert "managedBy" not in copy["spec"], "MultiKueue's copy is the worker's to run"
    kubeflow_on_manager.wait_state("kubeflow-shell", "Running", SHELL_TIMEOUT)
    sites[shell_cluster].kubectl.tell_to_finish(namespace, "kubeflow-shell-worker-0")
    finished_shell = kubeflow_on_manager.wait_state("kubeflow-shell", "Succeeded", SHELL_TIMEOUT)
    assert finished_shell["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1
    copies.wait_gone("kubeflow-shell")

    # A job that requests nothing its ClusterQueue covers is admitted on the manager with
    # no check: MultiKueue never dispatches it, and the job says so.
    unrequested = shell_job("unrequested", UNTIL_TOLD, DISPATCHED)
    del unrequested["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    on_manager.create(unrequested)
    (warning,) = [
        e
        for e in on_manager.wait_events("unrequested", ["NotDispatched"])
        if e["reason"] == "NotDispatched"
    ]
    assert "requests none of the resources" in warning["message"]
    on_manager.delete("unrequested")

    training = example("digits-mwms.yaml")
    training["metadata"]["labels"] = {QUEUE_LABEL: TRAINING}
    training["spec"]["managedBy"] = MULTIKUEUE
    # Requests the ClusterQueues cover: Kueue applies a queue's admission checks to the
    # flavors a Workload is assigned, and assigns none to one that requests nothing.
    container = training["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "50m"}}
    # The claim the job mounts, where it runs: MultiKueue copies the job, not its claim
    # (applying the example's file on the manager makes one there too, which no pod uses).
    TFJobs(worker_a.kubeconfig, namespace).create_claims(training)
    trained = on_manager.create(training)
    assert dispatched_to(on_manager, manager, trained) == WORKER_A
    chief_log = streamed_log(worker_a, namespace, "digits-mwms-worker-0")
    finished = on_manager.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    assert finished["status"]["replicaStatuses"]["Worker"]["succeeded"] >= 1
    output, _ = chief_log.communicate(timeout=60)
    (chief,) = results_in(output.splitlines())
    log.info("MWMS through MultiKueue on %s: accuracy %.3f", WORKER_A, chief["accuracy"])
    assert chief["strategy"] == "multi-worker-mirrored"
    assert chief["replicas"] == 2
    assert chief["accuracy"] >= chief["accuracy_threshold"]
    no_pods_on_the_manager(manager, namespace)

    # Where it ran, from the manager: events, describe, get; logs say where they are.
    events = on_manager.wait_events("digits-mwms", ["Dispatched"])
    assert any(WORKER_A in e["message"] for e in events if e["reason"] == "Dispatched")
    client = TFJobClient(namespace, kubeconfig=str(manager.kubeconfig))
    described = client.describe("digits-mwms")
    assert f"Runs on:    worker cluster {WORKER_A} (MultiKueue)" in described, described
    assert "State:      Succeeded" in described
    with pytest.raises(ValueError, match=f"runs on worker cluster {WORKER_A}.*kubeconfig"):
        list(client.logs("digits-mwms"))
    listed = subprocess.run(
        [CLI, "get", "--kubeconfig", str(manager.kubeconfig), "-n", namespace],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert listed[0].split()[-1] == "CLUSTER", listed
    rows = {line.split()[0]: line.split() for line in listed[1:]}
    assert rows["digits-mwms"][-1] == WORKER_A
    assert rows["kubeflow-shell"][-1] == shell_cluster


def test_jobs_spread_over_the_workers_quota_and_a_lost_workers_job_runs_on_the_other(
    sites: dict[str, Site], namespace: str
) -> None:
    """Each worker has quota for one job: of three, one runs on each worker and the third
    waits on the manager; it runs once one finishes. Then worker-b is lost with its job
    running: after LOST_AFTER, MultiKueue takes the dispatch back, Kueue dispatches the
    job again, to worker-a, and the job's events on the manager say so. Runs last: it
    stops worker-b."""
    manager = sites["manager"]
    on_manager = TFJobs(manager.kubeconfig, namespace)
    jobs = {
        name: on_manager.create(shell_job(name, UNTIL_TOLD, DISPATCHED))
        for name in ("first", "second", "third")
    }
    clusters: dict[str, str | None] = {}

    def dispatches() -> dict[str, str | None]:
        clusters.update(
            {
                name: cluster_of(manager_workload(manager, namespace, job["metadata"]["uid"]))
                for name, job in jobs.items()
            }
        )
        return dict(clusters)

    on_manager.poll(
        "third",
        dispatches,
        lambda seen: sorted(c for c in seen.values() if c) == [WORKER_A, WORKER_B],
        "two of the three jobs dispatched, one to each worker",
        SHELL_TIMEOUT,
    )
    (waiting,) = [name for name, cluster in clusters.items() if cluster is None]
    by_cluster = {cluster: name for name, cluster in clusters.items() if cluster}
    for name in by_cluster.values():
        on_manager.wait_state(name, "Running", SHELL_TIMEOUT)
    time.sleep(5)
    uid = jobs[waiting]["metadata"]["uid"]
    assert cluster_of(manager_workload(manager, namespace, uid)) is None
    assert not on_manager.get(waiting).get("status"), "a job waiting on the manager has no status"
    no_pods_on_the_manager(manager, namespace)
    for worker in (WORKER_A, WORKER_B):
        running = TFJobs(sites[worker].kubeconfig, namespace).get(by_cluster[worker])
        assert running["status"]["state"] == "Running"

    # worker-a's job finishes: the waiting one runs there (worker-b has no quota left).
    sites[WORKER_A].kubectl.tell_to_finish(namespace, f"{by_cluster[WORKER_A]}-worker-0")
    on_manager.wait_state(by_cluster[WORKER_A], "Succeeded", SHELL_TIMEOUT)
    assert dispatched_to(on_manager, manager, jobs[waiting], SHELL_TIMEOUT) == WORKER_A
    on_manager.wait_state(waiting, "Running", SHELL_TIMEOUT)
    sites[WORKER_A].kubectl.tell_to_finish(namespace, f"{waiting}-worker-0")
    on_manager.wait_state(waiting, "Succeeded", SHELL_TIMEOUT)

    # worker-b is lost with its job running: the job runs again on worker-a.
    lost = by_cluster[WORKER_B]
    sites[WORKER_B].lose()
    started = time.monotonic()
    events = on_manager.wait_events(lost, ["DispatchRetried"], 120)
    retried = [e for e in events if e["reason"] == "DispatchRetried"]
    log.info("worker-b lost: %s after %.0f s", retried[0]["message"], time.monotonic() - started)
    on_manager.poll(
        lost,
        lambda: cluster_of(manager_workload(manager, namespace, jobs[lost]["metadata"]["uid"])),
        lambda cluster: cluster == WORKER_A,
        f"dispatched again, to {WORKER_A}, after {WORKER_B} was lost ({LOST_AFTER})",
        180,
    )
    log.info("dispatched again %.0f s after worker-b was lost", time.monotonic() - started)
    events = on_manager.wait_events(lost, ["Dispatched"])
    moved = [e["message"] for e in events if e["reason"] == "Dispatched"]
    assert any(f"after worker cluster {WORKER_B}" in m for m in moved), moved
    TFJobs(sites[WORKER_A].kubeconfig, namespace).wait_state(lost, "Running", SHELL_TIMEOUT)
    sites[WORKER_A].kubectl.tell_to_finish(namespace, f"{lost}-worker-0")
    finished = on_manager.wait_state(lost, "Succeeded", SHELL_TIMEOUT)
    assert find_condition(finished, "Succeeded") is not None
    described = TFJobClient(namespace, kubeconfig=str(manager.kubeconfig)).describe(lost)
    assert f"Runs on:    worker cluster {WORKER_A} (MultiKueue)" in described
    assert "DispatchRetried" in described, described
    no_pods_on_the_manager(manager, namespace)
