"""What an integration that holds a job's pods back answers each decision.

Two integrations let a job's pods run only once something outside the operator agrees:
Kueue's admission of the job's Workload (queueing.py) and a gang scheduler's PodGroup
(gang.py). Each answers a decision with a `Gate`: open, with what it adds to each pod it
lets through; waiting, with why in its own words; or evicted, with why it took the pods
back. `decide` acts on the answer, not on the integration: a queue's gate stands before the
job starts (the job is Suspended while it is closed, as Kubeflow's jobs are under Kueue), a
gang's before its pods (the job runs; its pods are not created yet). The integration's own
writes (a Workload, a PodGroup) travel with the answer, typed by the integration, and go
into the plan as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from .spec import Replica

#: What an open gate adds to a pod being rendered (a placement), by the pod's replica.
Dressing = Callable[[dict[str, Any], Replica], None]

Writes = TypeVar("Writes")


class Passage(Enum):
    OPEN = "open"
    WAITING = "waiting"
    EVICTED = "evicted"


def _undressed(pod: dict[str, Any], replica: Replica) -> None:
    """An open gate that adds nothing to the pods."""


@dataclass(frozen=True)
class Gate(Generic[Writes]):
    """One integration's answer for one decision.

    `why`: while waiting, why (None where the integration has not said); once evicted, why
    the pods were taken back. `dress`: what an open gate adds to each pod it lets through.
    `writes`: the integration's own object writes that lead through the gate.
    """

    passage: Passage
    writes: Writes
    why: str | None = None
    dress: Dressing = _undressed

    @property
    def open(self) -> bool:
        return self.passage is Passage.OPEN


def opened(writes: Writes, dress: Dressing = _undressed) -> Gate[Writes]:
    return Gate(Passage.OPEN, writes, dress=dress)


def waiting(writes: Writes, why: str | None = None) -> Gate[Writes]:
    return Gate(Passage.WAITING, writes, why)


def evicted(writes: Writes, why: str) -> Gate[Writes]:
    return Gate(Passage.EVICTED, writes, why)
