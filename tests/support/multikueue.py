"""Three clusters for the tests of MultiKueue: a manager and two workers, each with Kueue.

- `worker-a` is the session's local cluster (its node has the trainer image), with the
  module's Kueue (support/kueue.py) and the operator run with --kubeflow;
- `worker-b` is a local cluster started for the module, its node with busybox only, with a
  Kueue and an operator of its own;
- the manager is a control plane alone: nothing runs pods there, its jobs run on the
  workers. Kueue runs beside it as MultiKueue's manager (tfjob_localcluster.addons.kueue:
  the generic adapter for both APIs, a lost worker given up after LOST_AFTER), and so does
  the operator, which makes the jobs' Workloads.

The manager reaches each worker with that worker's admin kubeconfig, its certificates
embedded (`kubectl config view --raw --flatten`), from a Secret in kueue-system, as
docs/queueing.md describes with a narrower identity.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.operator_process import OperatorCommand, OperatorProcess
from support.cluster import Kubectl
from support.fixtures import CRD, KUBEFLOW_CRD, install_crd
from support.kueue import KUEUE_API, apply, cluster_queue, delete, flavor, local_queue
from tfjob_localcluster.addons.kueue import (
    Kueue,
    MultiKueueManager,
    multikueue_secret,
)
from tfjob_localcluster.binaries import locate
from tfjob_localcluster.images.catalog import BUSYBOX
from tfjob_localcluster.local.cluster import LocalCluster
from tfjob_localcluster.local.controlplane import ControlPlane

log = logging.getLogger(__name__)

WORKER_A = "worker-a"
WORKER_B = "worker-b"
#: How long the manager waits for a worker it cannot reach before dispatching its jobs
#: again (Kueue's default is 15 minutes).
LOST_AFTER = "20s"
#: The AdmissionChecks (and MultiKueueConfigs) on the manager: both workers, or worker-a
#: alone (the trainer image is there).
BOTH = "multikueue"
ONLY_A = "multikueue-worker-a"
#: The manager's ClusterQueues and the LocalQueues that lead to them.
DISPATCHED = "dispatched"
TRAINING = "training"
#: A worker's quota: one of the tests' shell jobs (each asks for this much CPU).
WORKER_QUOTA = "100m"
FLAVOR = "multikueue-default"

Obj = dict[str, Any]


@dataclass
class Site:
    """One of the three clusters, as the tests reach it."""

    name: str
    kubeconfig: Path
    kubectl: Kubectl
    #: What stops it, last first (a worker's cluster, its Kueue, its operator).
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def embedded_kubeconfig(self) -> str:
        """The admin kubeconfig with its certificates in it: what Kueue accepts."""
        return str(self.kubectl("config", "view", "--raw", "--flatten", "--minify").stdout)

    def namespace(self, name: str) -> None:
        made = self.kubectl("create", "namespace", name, check=False)
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr

    def lose(self) -> None:
        """Stops everything of the cluster, as a cluster lost for good."""
        self.stack.close()


def _run_operator(stack: contextlib.ExitStack, kubeconfig: Path, log_path: Path) -> None:
    process = OperatorProcess(OperatorCommand.checkout("--kubeflow"), kubeconfig, log_path)
    process.run()
    stack.callback(process.stop)


def _run_kueue(
    stack: contextlib.ExitStack,
    kubeconfig: Path,
    kubectl: Path,
    plane: ControlPlane,
    state: Path,
    manager: MultiKueueManager | None = None,
) -> None:
    kueue = Kueue(kubeconfig, kubectl, plane.ca, state, multikueue=manager)
    kueue.start()
    stack.callback(kueue.stop)


def worker_queues(kubectl: Kubectl) -> list[Obj]:
    """A worker's flavor and ClusterQueue (quota for one shell job), made."""
    made = [flavor(FLAVOR), cluster_queue(FLAVOR, FLAVOR, WORKER_QUOTA)]
    apply(kubectl, *made)
    return made


@pytest.fixture(scope="module")
def worker_a(
    local_cluster: LocalCluster,
    project_images: tuple[str, ...],
    kubectl: Kubectl,
    kueue: Kueue,
    kubeflow_operator: OperatorProcess,
) -> Iterator[Site]:
    """The session's cluster as a worker, with the trainer image: support/kueue.py's Kueue
    and operator; its queue goes after the module."""
    made = worker_queues(kubectl)
    yield Site(WORKER_A, local_cluster.kubeconfig, kubectl)
    delete(kubectl, *reversed(made))


@pytest.fixture(scope="module")
def worker_b(cluster_state_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A local cluster of the module's own, as a worker (busybox only on its node)."""
    with contextlib.ExitStack() as stack:
        cluster = LocalCluster(cluster_state_root / "multikueue-worker-b", say=log.info)
        cluster.start()
        stack.callback(cluster.stop)
        cluster.load_images([BUSYBOX])
        kubectl = Kubectl(cluster.kubectl, cluster.kubeconfig)
        install_crd(kubectl, CRD)
        install_crd(kubectl, KUBEFLOW_CRD)
        assert cluster.control_plane is not None
        state = tmp_path_factory.mktemp("worker-b")
        _run_kueue(stack, cluster.kubeconfig, cluster.kubectl, cluster.control_plane, state)
        _run_operator(stack, cluster.kubeconfig, state / "operator.log")
        worker_queues(kubectl)
        site = Site(WORKER_B, cluster.kubeconfig, kubectl, stack.pop_all())
    with site.stack:
        yield site


def multikueue_objects(workers: list[Site]) -> list[Obj]:
    """The manager's MultiKueue: a MultiKueueCluster per worker (with its Secret), the
    configs and AdmissionChecks, and ClusterQueues that dispatch through them."""
    objects: list[Obj] = []
    for worker in workers:
        objects.append(multikueue_secret(worker.name, worker.embedded_kubeconfig()))
        source = {"kubeConfig": {"locationType": "Secret", "location": worker.name}}
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueCluster",
                "metadata": {"name": worker.name},
                "spec": {"clusterSource": source},
            }
        )
    for check, clusters in ((BOTH, [w.name for w in workers]), (ONLY_A, [WORKER_A])):
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueConfig",
                "metadata": {"name": check},
                "spec": {"clusters": clusters},
            }
        )
        parameters = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": check}
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": {"name": check},
                "spec": {
                    "controllerName": "kueue.x-k8s.io/multikueue",
                    "parameters": parameters,
                },
            }
        )
    objects.append(flavor(FLAVOR))
    for queue, check in ((DISPATCHED, BOTH), (TRAINING, ONLY_A)):
        strategy = {"admissionChecks": [{"name": check}]}
        objects.append(cluster_queue(queue, FLAVOR, "4", admissionChecksStrategy=strategy))
    return objects


@pytest.fixture(scope="module")
def manager(
    cluster_state_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    worker_a: Site,
    worker_b: Site,
) -> Iterator[Site]:
    """The manager: a control plane, Kueue as MultiKueue's manager, the operator."""
    kubectl_path = locate("kubectl").kubectl
    state = tmp_path_factory.mktemp("manager")
    with contextlib.ExitStack() as stack:
        plane = ControlPlane(cluster_state_root / "multikueue-manager", say=log.info)
        plane.start()
        stack.callback(plane.stop)
        kubectl = Kubectl(kubectl_path, plane.admin_kubeconfig)
        install_crd(kubectl, CRD)
        install_crd(kubectl, KUBEFLOW_CRD)
        lost = MultiKueueManager(worker_lost_timeout=LOST_AFTER)
        _run_kueue(stack, plane.admin_kubeconfig, kubectl_path, plane, state / "kueue", lost)
        _run_operator(stack, plane.admin_kubeconfig, state / "operator.log")
        apply(kubectl, *multikueue_objects([worker_a, worker_b]))
        yield Site("manager", plane.admin_kubeconfig, kubectl)


def queues_in(namespace: str, *sites: Site) -> None:
    """The namespace, with LocalQueues of both names, on each site: on the manager they
    lead to its dispatching ClusterQueues, on a worker to its one ClusterQueue."""
    for site in sites:
        site.namespace(namespace)
        for name in (DISPATCHED, TRAINING):
            target = name if site.name == "manager" else FLAVOR
            apply(site.kubectl, local_queue(namespace, target, name))


def manager_workload(site: Site, namespace: str, uid: str) -> Obj | None:
    """The Workload the operator made on the manager for the job of `uid`."""
    found = json.loads(
        site.kubectl(
            "get", "workloads", "-n", namespace, "-l", f"kueue.x-k8s.io/job-uid={uid}", "-o", "json"
        ).stdout
    )["items"]
    assert len(found) <= 1, f"two Workloads for one job: {found}"
    return found[0] if found else None


def cluster_of(workload: Obj | None) -> str | None:
    """The worker cluster MultiKueue dispatched a Workload to."""
    return ((workload or {}).get("status") or {}).get("clusterName")
