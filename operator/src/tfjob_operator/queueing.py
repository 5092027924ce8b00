"""Kueue admission of tfjob.dev TFJobs: for them, the operator is Kueue's job controller.

Kueue's own TFJob integration is compiled against kubeflow.org/v1: its webhook suspends
such a job at creation, its controller makes the job's Workload and unsuspends the job once
Kueue admits it. Kueue leaves jobs of other APIs to the controller that runs them (its
`integrations.externalFrameworks`, here `TFJob.v1.tfjob.dev`), and that controller does the
same work through the Workload: for a tfjob.dev TFJob labelled `kueue.x-k8s.io/queue-name`,

- the Workload is made from the spec (one pod set per replica type) and owned by the job;
- no pod is created until Kueue admits the Workload; the job reports Suspended meanwhile,
  with Kueue's reason;
- the pods are created with the node labels and tolerations of the ResourceFlavors their
  pod set was admitted to, as Kueue's own integrations place them;
- an evicted Workload (preempted, deactivated) stops the job, and once none of its pods is
  left, the operator gives the quota back (QuotaReserved=False), so that Kueue queues it
  again;
- a finished job marks its Workload Finished, which frees the quota.

The Workload's pod sets follow the replicas; when they change, the Workload is replaced.
Status writes to the Workload are merge patches conditional on its resourceVersion, built
from the conditions read, as Kueue's controllers write them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .api import (
    KUEUE_API_VERSION,
    KUEUE_JOB_UID_LABEL,
    LABEL_CONTROLLER_UID,
    LABEL_JOB_NAME,
    JobRef,
)
from .observe import FlavorObservation, WorkloadObservation
from .render import owner_reference
from .spec import JobSpec


def workload_name(job: JobRef) -> str:
    """`tfjob-<name>-<digest of the uid>`: one Workload per TFJob, never reused by the next
    TFJob of the same name."""
    digest = hashlib.sha256(job.uid.encode()).hexdigest()[:5]
    return f"tfjob-{job.name[:240]}-{digest}"


def pod_sets(spec: JobSpec) -> dict[str, int]:
    """Replicas per pod set: one pod set per replica type that has replicas."""
    return {t.label: s.replicas for t, s in spec.replica_specs.items() if s.replicas > 0}


def render_workload(job: JobRef, spec: JobSpec, queue: str) -> dict[str, Any]:
    """The Workload Kueue admits the job by; its pod templates are the replicas' own, whose
    container requests Kueue counts against the ClusterQueue's quota."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": job.namespace,
            "labels": {
                KUEUE_JOB_UID_LABEL: job.uid,
                LABEL_JOB_NAME: job.name,
                LABEL_CONTROLLER_UID: job.uid,
            },
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": t.label, "count": s.replicas, "template": dict(s.template)}
                for t, s in spec.replica_specs.items()
                if s.replicas > 0
            ],
        },
    }


@dataclass(frozen=True)
class Placement:
    """What an admission adds to the pods of one pod set."""

    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]


def placements(
    workload: WorkloadObservation, flavors: Mapping[str, FlavorObservation]
) -> dict[str, Placement] | str:
    """Each pod set's placement from the flavors it was admitted to, or why it cannot be
    known (a flavor not read)."""
    out = {}
    for pod_set, names in workload.flavors.items():
        missing = [n for n in names if n not in flavors]
        if missing:
            return (
                f"ResourceFlavor {', '.join(missing)} of Workload {workload.name} cannot be "
                "read (absent, or not readable by the operator)"
            )
        node_selector: dict[str, str] = {}
        tolerations: list[Mapping[str, Any]] = []
        for name in names:
            node_selector.update(flavors[name].node_labels)
            tolerations += [t for t in flavors[name].tolerations if t not in tolerations]
        out[pod_set] = Placement(node_selector, tuple(tolerations))
    return out


def place(pod: dict[str, Any], placement: Placement) -> None:
    """Adds the admission's node selector and tolerations to a pod being rendered."""
    spec = pod["spec"]
    if placement.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **placement.node_selector}
    if placement.tolerations:
        present = list(spec.get("tolerations") or [])
        spec["tolerations"] = present + [t for t in placement.tolerations if t not in present]


def finished_status(
    workload: WorkloadObservation, succeeded: bool, message: str, now: str
) -> dict[str, Any]:
    """The Workload's status once its job has finished: Finished, its quota given back."""
    done = "Workload has finished"
    return _status(
        workload,
        [
            _condition(
                workload, "Finished", True, "Succeeded" if succeeded else "Failed", message, now
            ),
            _condition(workload, "QuotaReserved", False, "Finished", done, now),
            _condition(workload, "Admitted", False, "Finished", done, now),
        ],
    )


def released_status(workload: WorkloadObservation, now: str) -> dict[str, Any]:
    """The status of an evicted Workload whose job has stopped: its quota given back, so
    that Kueue queues it again (at once when it was preempted)."""
    reason, message = workload.evicted or ("Evicted", "")
    requeue = reason in ("Preempted", "NodeFailures")
    none = "The workload has no reservation"
    return _status(
        workload,
        [
            _condition(workload, "Requeued", requeue, reason, message, now),
            _condition(workload, "QuotaReserved", False, "Pending", message, now),
            _condition(workload, "Admitted", False, "NoReservation", none, now),
        ],
    )


def _condition(
    workload: WorkloadObservation, kind: str, status: bool, reason: str, message: str, now: str
) -> dict[str, Any]:
    value = "True" if status else "False"
    old = next((c for c in workload.conditions if c.get("type") == kind), None)
    unchanged = old is not None and old.get("status") == value
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": workload.generation,
        "lastTransitionTime": old["lastTransitionTime"] if unchanged and old else now,
    }


def _status(workload: WorkloadObservation, changes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A merge patch of the Workload's status: the conditions read with `changes` applied,
    no admission, at the version read."""
    changed = {c["type"] for c in changes}
    kept = [dict(c) for c in workload.conditions if c.get("type") not in changed]
    return {
        "metadata": {"resourceVersion": workload.resource_version},
        "status": {"conditions": kept + list(changes), "admission": None},
    }
