"""The TFJob's status, built from a decision, and how soon a change to it is written.

A status change records a decision, a transition or progress. Decisions (a terminal
condition, a restart's count and replica generations, a suspension, the indexes that
succeeded) are written before any child is touched, because a restarted operator must find
them, and ahead of other jobs' writes. The Running transition is written at once too (a job
that finishes a moment later must still be seen running), but behind other jobs' children:
it decides nothing. Progress (the Created condition, pod counts, startTime) can be written a
moment late: the controller folds the progress of a busy second into one write.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Set
from enum import Enum
from typing import Any

from .api import ConditionType, JobRef, ReplicaType
from .observe import PodObservation
from .spec import Replica

#: Conditions whose change decides nothing (see the module docstring).
_PROGRESS_CONDITIONS = frozenset({ConditionType.CREATED.value, ConditionType.RUNNING.value})


class StatusWrite(Enum):
    """How soon a status change is written (see the module docstring)."""

    DECISION = "decision"
    TRANSITION = "transition"
    PROGRESS = "progress"


def replica_statuses(
    job: JobRef,
    types: Sequence[ReplicaType],
    pods: Sequence[PodObservation],
    succeeded: Mapping[str, Set[int]],
    restarts: Mapping[str, int],
    creating: Sequence[Replica] = (),
    deleting: Collection[str] = (),
) -> dict[str, dict[str, Any]]:
    """`status.replicaStatuses`: counts per replica type, as Kubeflow's clients read them.

    The counts are those the decision leads to: a pod it creates is active (Pending) and a
    pod it deletes (by uid in `deleting`) is not, so the status need not be written again
    once the watch shows the pods come and go. Terminating pods are neither active nor
    failed, as the Job controller counts them.
    """
    statuses: dict[str, dict[str, Any]] = {}
    for replica_type in types:
        of_type = [p for p in pods if p.replica and p.replica.type is replica_type]
        done = sorted(succeeded.get(replica_type.value, frozenset()))
        active = sum(1 for p in of_type if p.active and p.uid not in deleting)
        statuses[replica_type.value] = {
            "active": active + sum(1 for r in creating if r.type is replica_type),
            "succeeded": len(done),
            # A pod being deleted is not counted as failed: its deletion was decided (or, by
            # someone else, is a disruption the restart counts report).
            "failed": sum(
                1
                for p in of_type
                if p.failure is not None and not p.succeeded and not p.terminating
            ),
            "restarts": restarts.get(replica_type.value, 0),
            "selector": job.api.replica_selector(job.name, replica_type.label),
            "succeededIndexes": done,
        }
    return statuses


def totals(statuses: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    return {
        f"{count}Replicas": sum(int(s[count]) for s in statuses.values())
        for count in ("active", "succeeded", "failed")
    }


def status_write(old: Mapping[str, Any], new: Mapping[str, Any]) -> StatusWrite:
    """How soon going from `old` to `new` must be written."""
    if _decisions(old) != _decisions(new):
        return StatusWrite.DECISION
    if _running(old) != _running(new):
        return StatusWrite.TRANSITION
    return StatusWrite.PROGRESS


def _running(status: Mapping[str, Any]) -> object:
    """The Running condition's status, or None without one."""
    conditions = status.get("conditions") or []
    running = ConditionType.RUNNING.value
    return next((c.get("status") for c in conditions if c.get("type") == running), None)


def _decisions(status: Mapping[str, Any]) -> tuple[Any, ...]:
    conditions = status.get("conditions") or []
    return (
        sorted(
            (c.get("type"), c.get("status"), c.get("reason"))
            for c in conditions
            if c.get("type") not in _PROGRESS_CONDITIONS
        ),
        int(status.get("restartCount") or 0),
        dict(status.get("replicaGenerations") or {}),
        {
            replica_type: list(entry["succeededIndexes"])
            for replica_type, entry in (status.get("replicaStatuses") or {}).items()
            if entry.get("succeededIndexes")
        },
        status.get("completionTime"),
    )
