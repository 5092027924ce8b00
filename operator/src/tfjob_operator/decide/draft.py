"""The decision so far, frozen: each step of a decision takes a Draft and returns a new one.

It holds what the decision changes (the job's conditions, counts and times), what it does
(children to create and delete, events, the gates it asked) and when to look again; the
last step (progress.py) turns it into the Plan. A step's result depends only on what it is
given, never on which step ran before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import conditions as cond
from ..api import ConditionType
from ..conditions import Condition
from ..events import Event
from ..integrations.base import Gate
from ..observe import PodObservation, RestartCause, ServiceObservation
from ..plan import Creation, Deletion, soonest
from ..spec import Replica
from .seen import Seen


@dataclass(frozen=True)
class Draft:
    conditions: tuple[Condition, ...] = ()
    restart_count: int = 0
    #: Each replica's generation (decide/__init__.py: restart safety).
    generations: Mapping[str, int] = field(default_factory=dict)
    #: The indexes of each replica type that succeeded.
    succeeded: Mapping[str, frozenset[int]] = field(default_factory=dict)
    restarts_by_type: Mapping[str, int] = field(default_factory=dict)
    start_time: str | None = None
    completion_time: str | None = None
    #: The job's transitions, reported as events.
    events: tuple[Event, ...] = ()
    create_pods: tuple[Creation, ...] = ()
    delete_pods: tuple[Deletion, ...] = ()
    create_services: tuple[Creation, ...] = ()
    delete_services: tuple[Deletion, ...] = ()
    #: Replicas whose pods this decision creates.
    creating: tuple[Replica, ...] = ()
    #: The integrations' gates asked in this decision, by integration name, in the order
    #: asked; the open ones dress the pods this decision creates.
    gates: Mapping[str, Gate[Any]] = field(default_factory=dict)
    requeue_after: float | None = None
    #: The causes of the restarts of the job this decision counted, one each.
    restarted: tuple[RestartCause, ...] = ()
    #: ttlSecondsAfterFinished has passed.
    delete_job: bool = False
    #: `status.checkpoint`: where the replicas last stopped with a checkpoint (stops.py),
    #: and when the job resumed from it.
    checkpoint: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Draft:
        """The draft of a decision on a job whose persisted status is `status`."""
        replica_statuses = status.get("replicaStatuses") or {}
        return cls(
            conditions=tuple(dict(c) for c in status.get("conditions") or ()),
            restart_count=int(status.get("restartCount") or 0),
            generations=dict(status.get("replicaGenerations") or {}),
            succeeded={
                t: frozenset(s.get("succeededIndexes") or ()) for t, s in replica_statuses.items()
            },
            restarts_by_type={t: int(s.get("restarts") or 0) for t, s in replica_statuses.items()},
            start_time=status.get("startTime"),
            completion_time=status.get("completionTime"),
            checkpoint=status.get("checkpoint"),
        )

    @property
    def finished(self) -> bool:
        return cond.is_finished(self.conditions)

    def is_true(self, kind: ConditionType) -> bool:
        return cond.is_true(self.conditions, kind)

    def condition(self, kind: ConditionType) -> Mapping[str, Any] | None:
        return cond.find(self.conditions, kind)

    def succeeded_in(self, replica: Replica) -> bool:
        return replica.index in self.succeeded.get(replica.type.value, frozenset())

    def succeeding(self, replica: Replica) -> Draft:
        """With `replica` succeeded."""
        indexes = self.succeeded.get(replica.type.value, frozenset()) | {replica.index}
        return dataclasses.replace(self, succeeded={**self.succeeded, replica.type.value: indexes})

    def setting(
        self,
        seen: Seen,
        kind: ConditionType,
        status: bool,
        reason: str,
        message: str,
        since: str | None = None,
    ) -> Draft:
        """With the condition `kind` set now (conditions.py: times move only on change)."""
        conditions = cond.set_condition(
            self.conditions, kind, status, reason, message, seen.now_text, since
        )
        return dataclasses.replace(self, conditions=tuple(conditions))

    def reporting(self, kind: str, reason: str, message: str, series: str = "") -> Draft:
        """With an event of the job's."""
        return dataclasses.replace(
            self, events=(*self.events, Event(kind, reason, message, series))
        )

    def completed(self, seen: Seen) -> Draft:
        """With a completion time: the first one, if the job had one."""
        return dataclasses.replace(self, completion_time=self.completion_time or seen.now_text)

    def looking_again_within(self, seconds: float | None) -> Draft:
        """Deciding again at most `seconds` from now: the soonest of every reason to."""
        return dataclasses.replace(self, requeue_after=soonest(self.requeue_after, seconds))

    def creating_children(
        self, services: Sequence[Creation], pods: Sequence[tuple[Replica, Creation]]
    ) -> Draft:
        """With these services, and these replicas' pods, created."""
        return dataclasses.replace(
            self,
            create_services=(*self.create_services, *services),
            create_pods=(*self.create_pods, *(creation for _, creation in pods)),
            creating=(*self.creating, *(replica for replica, _ in pods)),
        )

    def deleting_pod(
        self, seen: Seen, pod: PodObservation, why: str, collectable: bool = False
    ) -> Draft:
        """With `pod` deleted, once, unless it is already terminating."""
        if pod.terminating:
            return self
        deletions = _adding(self.delete_pods, seen, pod, why, collectable)
        return dataclasses.replace(self, delete_pods=deletions)

    def deleting_service(
        self, seen: Seen, service: ServiceObservation, why: str, collectable: bool = False
    ) -> Draft:
        """With `service` deleted, once."""
        deletions = _adding(self.delete_services, seen, service, why, collectable)
        return dataclasses.replace(self, delete_services=deletions)

    def deleting_service_of(
        self, seen: Seen, pod_name: str, why: str, collectable: bool = False
    ) -> Draft:
        """With the service of the pod called `pod_name` deleted (they share a name)."""
        draft = self
        for service in seen.services:
            if service.name == pod_name:
                draft = draft.deleting_service(seen, service, why, collectable)
        return draft

    def asked(self, name: str, gate: Gate[Any]) -> Draft:
        """With the gate the integration called `name` gave."""
        return dataclasses.replace(self, gates={**self.gates, name: gate})

    @property
    def passed(self) -> tuple[Gate[Any], ...]:
        """The gates the pods passed, in the order asked."""
        return tuple(gate for gate in self.gates.values() if gate.open)


def _adding(
    deletions: tuple[Deletion, ...],
    seen: Seen,
    child: PodObservation | ServiceObservation,
    why: str,
    collectable: bool,
) -> tuple[Deletion, ...]:
    """`deletions` with `child`'s, unless they have it; collectable only if the child
    carries the job's uid label (Deletion.collectable selects on it)."""
    if any(d.uid == child.uid for d in deletions):
        return deletions
    collectable = collectable and child.labelled_uid == seen.ref.uid
    return (*deletions, Deletion(child.name, child.uid, why, collectable))
