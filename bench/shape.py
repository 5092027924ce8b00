"""The benchmark's TFJobs and the children an operator makes of them, built as data.

A shape such as `chief=1,worker=4,ps=2` says how many replicas of each type a TFJob has.
Every replica becomes one pod and one headless service named `<job>-<type>-<index>`, the
naming of Kubeflow's TFJob that this operator keeps; the harness relies on it to tell whose
child an object is, whichever operator is measured.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api import JobRef
from tfjob_operator.render import render_pod, render_service
from tfjob_operator.spec import InvalidSpec, JobSpec, parse_spec

Obj = dict[str, Any]

DEFAULT_SHAPE = "chief=1,worker=4,ps=2"
#: Replica types by the lowercase name used on the command line and in child names.
REPLICA_TYPES = {
    "chief": "Chief",
    "master": "Master",
    "worker": "Worker",
    "ps": "PS",
    "evaluator": "Evaluator",
}
#: Never pulled: kwok runs no container.
IMAGE = "tfjob-bench.invalid/trainer:none"
BENCH_LABEL = "tfjob-bench/run"


class ShapeError(ValueError):
    pass


@dataclass(frozen=True)
class Shape:
    """Replica counts by TFJob replica type (`Chief`, `Worker`, ...), in the order given."""

    counts: tuple[tuple[str, int], ...]

    @property
    def replicas_per_job(self) -> int:
        return sum(count for _, count in self.counts)

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)

    def describe(self) -> str:
        return ",".join(f"{kind.lower()}={count}" for kind, count in self.counts)

    def replica_spec(self) -> Obj:
        """spec.tfReplicaSpecs: every type runs the same never-started container."""
        return {
            kind: {"replicas": count, "restartPolicy": "Never", "template": pod_template()}
            for kind, count in self.counts
        }

    def job_spec(self) -> Obj:
        # cleanPodPolicy is the default of both this operator and Kubeflow's, stated so
        # that operators with another default still do the same work.
        return {"runPolicy": {"cleanPodPolicy": "Running"}, "tfReplicaSpecs": self.replica_spec()}

    def parsed(self, job_name: str) -> JobSpec:
        """The spec as the operator reads it (defaults applied, validated)."""
        return parse_spec(job_name, self.job_spec())

    def child_names(self, job_name: str) -> list[str]:
        return [replica.name(job_name) for replica in self.parsed(job_name).replicas()]

    def leader_name(self, job_name: str) -> str:
        """The pod whose success decides the job: the chief, else worker 0."""
        leader = self.parsed(job_name).leader()
        if leader is None:
            raise ShapeError("the shape has neither a chief nor a worker to decide success")
        return str(leader.name(job_name))

    def leaders(self, job_names: list[str]) -> dict[str, str]:
        """Leader pod name -> its job's name."""
        return {self.leader_name(name): name for name in job_names}


def parse_shape(text: str) -> Shape:
    """Parses `chief=1,worker=4,ps=2`; raises ShapeError naming the problem."""
    counts: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in REPLICA_TYPES:
            raise ShapeError(
                f"replica shape {text!r}: {part!r} is not TYPE=COUNT with TYPE one of "
                f"{', '.join(REPLICA_TYPES)}"
            )
        kind = REPLICA_TYPES[key]
        if kind in counts:
            raise ShapeError(f"replica shape {text!r}: {key} is given twice")
        try:
            count = int(value)
        except ValueError:
            raise ShapeError(f"replica shape {text!r}: {value!r} is not a number") from None
        if count < 1:
            raise ShapeError(f"replica shape {text!r}: {key} needs at least 1 replica")
        counts[kind] = count
    shape = Shape(tuple(counts.items()))
    try:
        shape.leader_name(job_name(0))
    except InvalidSpec as invalid:
        raise ShapeError(f"replica shape {text!r}: {invalid}") from None
    return shape


def pod_template() -> Obj:
    return {
        "metadata": {"labels": {BENCH_LABEL: "true"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "tensorflow", "image": IMAGE, "command": ["python", "-m", "train"]}
            ],
        },
    }


def job_name(index: int) -> str:
    return f"bench-{index:05d}"


def job_names(count: int) -> list[str]:
    return [job_name(i) for i in range(count)]


def job_of_child(name: str) -> str:
    """`bench-00042-worker-3` -> `bench-00042`."""
    return name.rsplit("-", 2)[0]


def tfjob(api_version: str, name: str, shape: Shape) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": "TFJob",
        "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
        "spec": shape.job_spec(),
    }


def floor_objects(namespace: str, names: list[str], shape: Shape) -> Iterator[tuple[str, Obj]]:
    """(collection path, object) for every child of every job, as the operator renders them.

    The owner reference is dropped: it would name a uid no TFJob has, and the garbage
    collector deletes children of an owner that does not exist.
    """
    for name in names:
        spec = shape.parsed(name)
        job = JobRef(namespace, name, uid="")
        replicas = list(spec.replicas())
        for replica in replicas:
            yield (
                f"/api/v1/namespaces/{namespace}/services",
                _unowned(render_service(job, spec, replica)),
            )
        for replica in replicas:
            yield (
                f"/api/v1/namespaces/{namespace}/pods",
                _unowned(render_pod(job, spec, replica, generation=0)),
            )


def _unowned(obj: Obj) -> Obj:
    unowned = copy.deepcopy(obj)
    unowned["metadata"].pop("ownerReferences", None)
    return unowned


def leader_exit_patch(pod: Obj, finished_at: str) -> Obj:
    """A merge patch of the pod's status: its containers exited 0 at `finished_at`.

    What a kubelet reports when the container ends: phase Succeeded, every container
    terminated with exit code 0, Ready and ContainersReady false. Lists are replaced whole
    by a merge patch, so they are rebuilt from the pod's current status.
    """
    status = pod.get("status") or {}
    containers = []
    for container in status.get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running") or {}
        terminated = {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": running.get("startedAt") or finished_at,
            "finishedAt": finished_at,
        }
        containers.append(
            {**container, "ready": False, "started": False, "state": {"terminated": terminated}}
        )
    ended = {"status": "False", "reason": "PodCompleted", "lastTransitionTime": finished_at}
    conditions = [
        {**condition, **ended}
        if condition.get("type") in ("Ready", "ContainersReady")
        else condition
        for condition in status.get("conditions") or []
    ]
    return {
        "status": {"phase": "Succeeded", "conditions": conditions, "containerStatuses": containers}
    }
