"""What an integration is to the operator's core: what it watches, how it holds a job
back, and what it writes.

An integration brings another project's objects into a TFJob's life: Kueue's Workload, a
gang scheduler's PodGroup, the job's TensorBoard. The core keeps the TFJob's own flow and
asks each integration, at fixed points, through one interface (as Kueue's jobframework asks
each of its job kinds through `GenericJob`):

- `watches`: the resources it watches, each object read into a small record filed under
  its job; the controller keeps them in a store of the integration's own.
- `observe`: what it needs beyond its records, read before a decision (Kueue reads the
  ResourceFlavors an admission names); the result is data, handed to `decide`.
- `check`: an error in the spec that only it can see (gang options without a gang
  scheduler); the job then fails as invalid. `preview`: what it makes for a new job, for
  `tfjob-operator render`.
- `gate`: its answer for a job it holds back, at its `stage`: a queue holds the whole job
  (Suspended while closed), a gang its pods (the job runs; its pods are not created yet).
  An open gate may dress each pod it lets through.
- `settle`: once the core has decided the job's status, its own writes, its field of the
  status, its events and when to look again (the Workload finished with its job, a
  PodGroup released, a TensorBoard made or removed).
- `apply`: those writes, made by the controller before the pods (a prerequisite) or after
  them (beside the job).
- `dispatched`: its part for a job another controller runs (MultiKueue, from a manager
  cluster), of which the core writes nothing: a queue still makes its Workload.

Everything but `observe` and `apply` is pure: `decide` stays a function of data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..events import Event
from ..job_view import JobView
from ..resources import JobKey, Resource
from ..spec import InvalidSpec, JobSpec, Replica

#: What an open gate adds to a pod being rendered (a placement), by the pod's replica.
Dressing = Callable[[dict[str, Any], Replica], None]

Writes = TypeVar("Writes")
Observed = TypeVar("Observed")


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


class Stage(Enum):
    """Where an integration stands in a job's life."""

    #: Before the job starts: the job is Suspended while the gate is closed (a queue).
    JOB = "job"
    #: Before the job's pods: the job runs, its pods wait (a gang).
    PODS = "pods"
    #: Beside the job: it holds nothing back (a TensorBoard).
    BESIDE = "beside"


@dataclass(frozen=True)
class Outcome:
    """What the TFJob's own decision came to, for each integration's `settle`."""

    #: The job's status as decided (conditions, startTime, completionTime, ...).
    status: Mapping[str, Any]
    finished: bool
    succeeded: bool
    suspended: bool
    #: Suspended because its spec says so, not because a gate is closed.
    suspended_by_spec: bool
    #: The message of the condition that finished the job ("" while it runs).
    message: str
    now: datetime


@dataclass(frozen=True)
class Settled(Generic[Writes]):
    """An integration's part of a plan."""

    writes: Writes
    #: Its field of the job's status (`status_field`); None: the field is absent.
    status: Mapping[str, Any] | None = None
    events: tuple[Event, ...] = ()
    #: Decide again within this many seconds, when no watch event may come first.
    requeue_after: float | None = None


#: Reads a watched object into the record the integration keeps, filed under its job (the
#: object's uid, the job's namespace and name); None skips it.
Reader = Callable[[Mapping[str, Any]], "tuple[str, JobKey, Any] | None"]


@dataclass(frozen=True)
class Watched:
    resource: Resource
    read: Reader


class ObjectWrites(Protocol):
    """Kube's generic writes of a namespaced object an integration makes (kube.Kube)."""

    async def create_object(
        self, namespace: str, group_path: str, plural: str, body: Mapping[str, Any]
    ) -> bool: ...
    async def delete_object(
        self, namespace: str, group_path: str, plural: str, name: str, uid: str
    ) -> bool: ...


class Host(Protocol):
    """What an integration's `apply` may ask of the controller, for one job."""

    #: The operator's client of the API server (kube.Kube): an integration uses the writes
    #: its module declares.
    @property
    def api(self) -> Any: ...

    def record(self, event: Event) -> None: ...

    def record_deleted(self, kind: str, name: str, why: str) -> None:
        """Records that this call deleted the job's `kind` `name`, and why (an event
        `SuccessfulDelete<kind>`, as the job's children's)."""
        ...

    def creating(self, kind: str, name: str) -> bool:
        """False while a create of this child is recent enough that the watch may not show
        it yet (it is not sent again); else records this one."""
        ...

    def forget_create(self, kind: str, name: str) -> None:
        """The child is gone, or its create failed: the next create of it goes out."""
        ...

    async def create_prerequisite(
        self,
        body: Mapping[str, Any],
        create: Callable[[str, Mapping[str, Any]], Any],
        *,
        missing: str,
        created: str,
    ) -> None:
        """Creates an object the job's pods wait for, and says so in an event (a failure
        too, and raised: the job is tried again with backoff). `missing` says what to check
        when its API is not served; `created` ends the event of an object created."""
        ...


class Integration(Generic[Observed, Writes]):
    """The base of every integration: each method's default is "nothing to do"."""

    #: The integration's name: its store, its observation and its writes are filed under it.
    name: ClassVar[str]
    stage: ClassVar[Stage]
    #: The field of the job's status it owns, if any.
    status_field: ClassVar[str | None] = None

    def watches(self) -> Sequence[Watched]:
        return ()

    async def observe(
        self, job: JobView, records: Sequence[Any], reads: Any, now: float
    ) -> Observed:
        """What a decision of `job` reads of this integration, from its `records` (what its
        watches show of the job) and `reads`, the controller's reader of what no watch
        covers (kube.Kube); `now` is the controller's monotonic clock."""
        raise NotImplementedError

    def check(self, job: JobView, spec: JobSpec, observed: Observed) -> InvalidSpec | None:
        return None

    def preview(self, job: JobView, spec: JobSpec) -> Sequence[dict[str, Any]]:
        """What it makes for a new job, nothing observed yet (`tfjob-operator render`);
        raises InvalidSpec for what it refuses."""
        return ()

    def preview_dress(self, job: JobView, spec: JobSpec) -> Dressing | None:
        """What its open gate would add to each pod of a new job, for the same preview;
        None where it adds nothing it can know before it has observed anything."""
        return None

    def gate(
        self, job: JobView, spec: JobSpec, observed: Observed, *, pods_exist: bool, now: str
    ) -> Gate[Writes] | None:
        """Its gate for `job`, at its stage; None where it does not hold this job."""
        return None

    def suspended_why(
        self, job: JobView, spec: JobSpec, observed: Observed, gate: Gate[Writes] | None
    ) -> str | None:
        """A queue's words for why the job is suspended (`gate` is its gate in this
        decision, if it holds the job), or None to leave the core's."""
        return None

    def pods_wait_why(
        self, job: JobView, observed: Observed, pods_say: tuple[str, str] | None
    ) -> tuple[str, str] | None:
        """A gang's reason and message for pods that cannot be placed, given what the
        pods say (their waiting reason and message); None to leave the pods' words."""
        return None

    def settle(
        self,
        job: JobView,
        spec: JobSpec | None,
        observed: Observed,
        outcome: Outcome,
        gate: Gate[Writes] | None,
    ) -> Settled[Writes] | None:
        """Its part of the plan, once the job's status is decided (`spec` None: invalid);
        `gate` is its gate in this decision, if it was asked. None: nothing."""
        return None

    def dispatched(
        self, job: JobView, spec: JobSpec, observed: Observed, now: datetime
    ) -> Settled[Writes] | None:
        """Its part of the plan of a job another controller runs (`job.managed_by`: MultiKueue
        dispatches it to a worker cluster), of which the core writes nothing. None: nothing."""
        return None

    async def apply(self, job: JobView, writes: Writes, host: Host) -> float | None:
        """Makes the plan's writes; returns when to look again, if it must."""
        return None


@dataclass(frozen=True)
class Observation:
    """One integration's observation for one decision."""

    integration: Integration[Any, Any]
    observed: Any
