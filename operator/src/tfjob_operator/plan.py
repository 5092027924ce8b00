"""What one decision does: a frozen Plan, which the controller applies as it is.

`decide` (decide/) makes it from what the operator observes; the controller and children.py
carry it out. `soonest` is the one rule for merging reasons to decide again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import status as status_of
from .events import Event
from .integrations.base import Integration
from .observe import RestartCause


@dataclass(frozen=True)
class Deletion:
    name: str
    uid: str
    why: str
    #: May be deleted together with the job's other collectable children of its kind, by
    #: one request that selects on the job's uid label (a finished job's clean-up).
    collectable: bool = False


@dataclass(frozen=True)
class Creation:
    """A child to create: its name, and how to build its body.

    The body is built when the batch that sends it goes out (children.py), not when the
    plan is made: a pod's TF_CONFIG names every replica of its job, so a job of a thousand
    replicas would otherwise hold a thousand such pods in memory at once.
    """

    name: str
    render: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class Plan:
    """What one decision does; the controller applies it as it is."""

    status: dict[str, Any] | None = None
    create_pods: tuple[Creation, ...] = ()
    delete_pods: tuple[Deletion, ...] = ()
    create_services: tuple[Creation, ...] = ()
    delete_services: tuple[Deletion, ...] = ()
    events: tuple[Event, ...] = ()
    #: Seconds until a deadline or TTL expires, when no watch event may arrive first.
    requeue_after: float | None = None
    #: ttlSecondsAfterFinished has passed: delete the TFJob.
    delete_job: bool = False
    #: Each integration's writes (integrations/base.py: `settle`), in the integrations'
    #: order; one that has nothing to write is absent.
    integration_writes: tuple[tuple[Integration[Any, Any], Any], ...] = ()
    #: The causes of the restarts of the job this decision counted, one each (written to
    #: the status first).
    restarted: tuple[RestartCause, ...] = ()
    #: How soon the new status is written: a decision before any child is touched, ahead of
    #: other jobs' writes; progress a moment later (status.py).
    status_write: status_of.StatusWrite = status_of.StatusWrite.PROGRESS

    def writes_of(self, name: str) -> Any | None:
        """The writes of the integration called `name`, if it has any."""
        return next((w for i, w in self.integration_writes if i.name == name), None)

    def looking_again_within(self, seconds: float | None) -> Plan:
        """The plan, deciding again at most `seconds` from now (None: no new reason)."""
        return dataclasses.replace(self, requeue_after=soonest(self.requeue_after, seconds))


def soonest(current: float | None, seconds: float | None) -> float | None:
    """The sooner of two times to look again; None is no reason to."""
    if seconds is None:
        return current
    return seconds if current is None else min(current, seconds)
