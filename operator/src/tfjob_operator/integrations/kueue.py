"""Kueue admission of TFJobs with the operator as Kueue's job controller.

Kueue runs the jobs of its own integrations itself, and leaves the others to the controller
that runs them (its `integrations.externalFrameworks`), which does the same work through
the Workload. tfjob.dev's TFJobs are always such jobs (`TFJob.v1.tfjob.dev`). kubeflow.org's
are too since Kueue stopped enabling its `kubeflow.org/tfjob` integration by default
(`TFJob.v1.kubeflow.org`); where a cluster still enables it, Kueue suspends the job at
creation and makes its Workload, and the operator sees that Workload and leaves the job to
Kueue (`made_here`), so a job never has two. For a TFJob labelled `kueue.x-k8s.io/queue-name`
on the operator's route,

- the Workload is made from the spec (one pod set per replica type) and owned by the job,
  with the priority Kueue gives its own jobs (the WorkloadPriorityClass the job's
  `kueue.x-k8s.io/priority-class` label names, else the pods' priorityClassName, else the
  cluster's default PriorityClass) and each pod set's topology request (the replica
  template's `kueue.x-k8s.io/podset-*-topology` annotations);
- no pod is created until Kueue admits the Workload; the job reports Suspended meanwhile,
  with Kueue's reason;
- the pods are created with the node labels and tolerations of the ResourceFlavors their
  pod set was admitted to, as Kueue's own integrations place them, and, for a pod set
  admitted with a topology assignment, held by Kueue's topology scheduling gate, which
  Kueue lifts once it has put each pod in its domain;
- an evicted Workload (preempted, deactivated) stops the job, and once none of its pods is
  left, the operator gives the quota back (QuotaReserved=False), so that Kueue queues it
  again;
- a finished job marks its Workload Finished, which frees the quota.

The Workload's pod sets follow the replicas; when they change, the Workload is replaced.
Status writes to the Workload are merge patches conditional on its resourceVersion, built
from the conditions read, as Kueue's controllers write them.

Under MultiKueue (docs/queueing.md) the operator is this job controller on both sides:

- on the manager cluster, a job whose managedBy is `kueue.x-k8s.io/multikueue` gets its
  Workload as above, and an evicted one's quota back, but no pod and no status write
  (`dispatched`): MultiKueue's generic adapter, which reads `spec.managedBy`, copies the
  job to a worker cluster and the worker's status back. A job that says so in Kubeflow's
  `spec.runPolicy.managedBy` alone first gets `spec.managedBy` to match, the field that
  adapter reads, and its Workload after. Where MultiKueue runs the job, and each
  re-dispatch, become events of the job;
- on a worker cluster, MultiKueue creates the Workload before the job's copy, which names
  it (`kueue.x-k8s.io/prebuilt-workload-name`): the operator adopts that Workload (owner
  reference, labels) instead of making one, and runs the job as any queued job.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from ..api import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_POD_SET_LABEL,
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_QUEUE_LABEL,
    KUEUE_REQUIRED_TOPOLOGY,
    KUEUE_SLICE_REQUIRED_TOPOLOGY,
    KUEUE_SLICE_SIZE,
    KUEUE_TOPOLOGY_GATE,
    KUEUE_UNCONSTRAINED_TOPOLOGY,
    KUEUE_WORKLOAD_ANNOTATION,
    KUEUE_WORKLOADS_PATH,
    LABEL_REPLICA_INDEX,
    TFJOB_DEV,
    JobRef,
    TFJobApi,
)
from ..apiserver.errors import ApiError
from ..events import NORMAL, WARNING, Event
from ..job_view import JobView
from ..observe import FlavorObservation, PriorityClass, WorkloadObservation, observe_workload
from ..resources import JobKey, Resource
from ..spec import JobSpec, Replica
from ..timeutil import to_rfc3339
from . import base as gates
from .base import Gate, Host, Integration, Outcome, Passage, Settled, Stage, Watched


def workload_name(job: JobRef) -> str:
    """`tfjob-<name>-<digest of the uid>`: one Workload per TFJob, never reused by the next
    TFJob of the same name."""
    digest = hashlib.sha256(job.uid.encode()).hexdigest()[:5]
    return f"tfjob-{job.name[:240]}-{digest}"


def pod_sets(spec: JobSpec) -> dict[str, int]:
    """Replicas per pod set: one pod set per replica type that has replicas."""
    return {t.label: s.replicas for t, s in spec.replica_specs.items() if s.replicas > 0}


#: Go's strconv.ParseBool, which Kueue reads the unconstrained-topology annotation with.
_BOOLEANS: Final = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def workload_priority_class(name: str) -> dict[str, str]:
    """A Workload's `priorityClassRef` to a WorkloadPriorityClass."""
    return {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": name}


def pod_priority_class(name: str) -> dict[str, str]:
    """A Workload's `priorityClassRef` to a pods' PriorityClass."""
    return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}


def priority_class(priority_label: str | None, spec: JobSpec) -> dict[str, str] | None:
    """The class the Workload's priority comes from, as Kueue picks it for its own jobs: the
    WorkloadPriorityClass the job names, else the first replica's pod priorityClassName;
    None leaves it to the cluster's default PriorityClass (the controller reads it)."""
    if priority_label:
        return workload_priority_class(priority_label)
    for replica in spec.replica_specs.values():
        name = (replica.template.get("spec") or {}).get("priorityClassName")
        if name:
            return pod_priority_class(str(name))
    return None


def default_priority(classes: Sequence[PriorityClass]) -> tuple[dict[str, str] | None, int]:
    """A Workload's priority when its job names no class, as Kueue gives it: the cluster's
    default PriorityClass (the lowest of those marked globalDefault), else none and 0."""
    defaults = [c for c in classes if c.global_default]
    if not defaults:
        return None, 0
    lowest = min(defaults, key=lambda c: c.value)
    return pod_priority_class(lowest.name), lowest.value


def with_priority(
    workload: Mapping[str, Any], found: tuple[Mapping[str, str] | None, int]
) -> dict[str, Any]:
    """The Workload with the priority its class gives (read by the controller, as Kueue
    reads it when it makes a Workload): `priorityClassRef` and `priority`."""
    ref, value = found
    spec = {k: v for k, v in workload["spec"].items() if k != "priorityClassRef"}
    if ref is not None:
        spec["priorityClassRef"] = dict(ref)
    return {**workload, "spec": {**spec, "priority": value}}


def topology_request(template: Mapping[str, Any]) -> dict[str, Any]:
    """A pod set's topology request from its replica template's annotations, read as Kueue
    reads them for its own jobs; the pod index label lets Kueue's topology assignment
    keep neighbouring replica indexes in neighbouring domains."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    request: dict[str, Any] = {"podIndexLabel": LABEL_REPLICA_INDEX}
    if KUEUE_REQUIRED_TOPOLOGY in annotations:
        request["required"] = annotations[KUEUE_REQUIRED_TOPOLOGY]
    elif KUEUE_PREFERRED_TOPOLOGY in annotations:
        request["preferred"] = annotations[KUEUE_PREFERRED_TOPOLOGY]
    elif annotations.get(KUEUE_UNCONSTRAINED_TOPOLOGY) in _BOOLEANS:
        request["unconstrained"] = _BOOLEANS[annotations[KUEUE_UNCONSTRAINED_TOPOLOGY]]
    slice_size = str(annotations.get(KUEUE_SLICE_SIZE, ""))
    if KUEUE_SLICE_REQUIRED_TOPOLOGY in annotations and slice_size.isdigit():
        request["podSetSliceRequiredTopology"] = annotations[KUEUE_SLICE_REQUIRED_TOPOLOGY]
        request["podSetSliceSize"] = int(slice_size)
    return request


def render_workload(
    job: JobRef, spec: JobSpec, queue: str, priority_label: str | None = None
) -> dict[str, Any]:
    """The Workload Kueue admits the job by; its pod templates are the replicas' own, whose
    container requests Kueue counts against the ClusterQueue's quota. Its priority is
    named (`priorityClassRef`), and its value read by the controller (`with_priority`)."""
    ref = priority_class(priority_label, spec)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": job.namespace,
            "labels": {KUEUE_JOB_UID_LABEL: job.uid, **job.owned_labels()},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "queueName": queue,
            **({"priorityClassRef": ref} if ref else {}),
            "podSets": [
                {
                    "name": t.label,
                    "count": s.replicas,
                    "template": dict(s.template),
                    "topologyRequest": topology_request(s.template),
                }
                for t, s in spec.replica_specs.items()
                if s.replicas > 0
            ],
        },
    }


@dataclass(frozen=True)
class Placement:
    """What an admission adds to the pods of one pod set: where the flavors put them, the
    names Kueue finds them by, and whether Kueue's topology assignment places them."""

    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    workload: str
    pod_set: str
    topology: bool = False


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
        out[pod_set] = Placement(
            node_selector,
            tuple(tolerations),
            workload.name,
            pod_set,
            pod_set in workload.topology_assigned,
        )
    return out


def place(pod: dict[str, Any], placement: Placement) -> None:
    """Adds the admission's node selector, tolerations, Kueue's names and, for a topology
    assignment, Kueue's scheduling gate to a pod being rendered."""
    metadata = pod["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), KUEUE_POD_SET_LABEL: placement.pod_set}
    annotations = {**(metadata.get("annotations") or {})}
    metadata["annotations"] = {**annotations, KUEUE_WORKLOAD_ANNOTATION: placement.workload}
    spec = pod["spec"]
    if placement.topology:
        gates = spec.get("schedulingGates") or []
        spec["schedulingGates"] = [*gates, {"name": KUEUE_TOPOLOGY_GATE}]
    if placement.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **placement.node_selector}
    if placement.tolerations:
        present = list(spec.get("tolerations") or [])
        spec["tolerations"] = present + [t for t in placement.tolerations if t not in present]


def on_operators_route(api: TFJobApi, workloads: Sequence[WorkloadObservation]) -> bool:
    """Whether the operator is Kueue's job controller for a queued job of `api` that owns
    `workloads`: always for tfjob.dev; for kubeflow.org unless Kueue's own Kubeflow
    integration made the job a Workload (where a cluster enables it, Kueue suspends the job
    at creation, makes its Workload and resumes it: the job's admission is Kueue's)."""
    return api is TFJOB_DEV or all(w.made_here for w in workloads)


def adoption(job: JobRef, workload: WorkloadObservation) -> dict[str, Any]:
    """The merge patch that makes a Workload MultiKueue made the job's own, as Kueue's
    integrations adopt a prebuilt Workload: owned by the job, labelled with its uid."""
    return {
        "metadata": {
            "resourceVersion": workload.resource_version,
            "labels": {KUEUE_JOB_UID_LABEL: job.uid, **job.owned_labels()},
            "ownerReferences": [job.owner_reference()],
        }
    }


@dataclass(frozen=True)
class Dispatch:
    """Where MultiKueue runs a job, as its manager-side Workload says: the worker cluster,
    and each admission check's state and message; `last`, the worker cluster it last ran
    on, kept while it waits to be dispatched again."""

    cluster: str | None
    checks: frozenset[tuple[str, str, str]]
    #: Admitted here with no admission check: MultiKueue never sees it.
    unchecked: bool = False
    last: str | None = None

    @classmethod
    def of(cls, workload: WorkloadObservation | None, before: Dispatch | None = None) -> Dispatch:
        last = before.last if before else None
        if workload is None:
            return cls(None, frozenset(), last=last)
        unchecked = workload.admitted and not workload.checks and not workload.cluster_name
        cluster = workload.cluster_name
        return cls(cluster, frozenset(workload.checks), unchecked, cluster or last)


#: Admission check states that take a dispatch back (Kueue's CheckState).
RETRY_STATES: Final = {"Retry": "DispatchRetried", "Rejected": "DispatchRejected"}


def dispatch_events(before: Dispatch | None, now: Dispatch, workload: str) -> tuple[Event, ...]:
    """What changed of where MultiKueue runs the job since `before` (None: not known, as
    after the operator starts): a new worker cluster, a check that takes it back."""
    events: list[Event] = []
    known = before or Dispatch(None, frozenset())
    if now.unchecked and not known.unchecked:
        text = (
            f"Kueue admitted Workload {workload} on this cluster with no admission check, so "
            "MultiKueue does not dispatch it and nothing runs it: Kueue applies a "
            "ClusterQueue's checks to the flavors a Workload is assigned, and one that requests "
            "none of the resources its ClusterQueue covers is assigned none. Request them "
            "(cpu, memory) in the replicas' containers"
        )
        events.append(Event(WARNING, "NotDispatched", text))
    for name, state, message in sorted(now.checks - known.checks):
        if state in RETRY_STATES:
            text = f"Admission check {name} of Workload {workload}: {state}: {message}"
            events.append(Event(WARNING, RETRY_STATES[state], text))
    if now.cluster is not None and now.cluster != known.cluster:
        text = (
            f"MultiKueue runs the job on worker cluster {now.cluster} (Workload {workload}); "
            "its status here mirrors the copy there"
        )
        if known.last is not None and known.last != now.cluster:
            text += f", after worker cluster {known.last}"
        events.append(Event(NORMAL, "Dispatched", text))
    return tuple(events)


@dataclass(frozen=True)
class WorkloadWrites:
    """A decision's writes of the job's Workload: one to create (while no pod exists),
    those to delete (the replicas changed, the job is suspended) with why, and a status
    merge patch (the job finished, or its evicted pods are gone: the quota given back)."""

    create: dict[str, Any] | None = None
    delete: list[tuple[WorkloadObservation, str]] = field(default_factory=list)
    patch_status: tuple[WorkloadObservation, dict[str, Any]] | None = None
    #: A Workload MultiKueue made for the job, and the patch that makes it the job's.
    adopt: tuple[WorkloadObservation, dict[str, Any]] | None = None
    #: The job's spec.managedBy to write (mirroring spec.runPolicy.managedBy).
    managed_by: str | None = None
    #: Where MultiKueue runs the job, as this decision reported it (events).
    dispatch: Dispatch | None = None


def admission(
    job: JobRef,
    spec: JobSpec,
    queue: str,
    priority_label: str | None,
    workloads: Sequence[WorkloadObservation],
    flavors: Mapping[str, FlavorObservation],
    *,
    pods_exist: bool,
    now: str,
    prebuilt: str | None = None,
    adoptable: WorkloadObservation | None = None,
) -> Gate[WorkloadWrites]:
    """Kueue's gate for a queued job on the operator's route: open once its Workload is
    admitted (each pod placed where its pod set was admitted), waiting with Kueue's reason
    where Kueue has given one, evicted with Kueue's reason while the job stops.

    Creates the Workload if there is none (once the job has no pods), replaces it when the
    replicas changed, and gives the quota of an evicted one back once the job's pods are
    gone. After that the job waits as any queued job (Kueue's next admission clears
    Evicted).

    A job MultiKueue dispatched here names its Workload (`prebuilt`), which MultiKueue
    makes: the operator never makes one for it, and adopts that one (`adoptable`, if read).
    """
    workload = workloads[0] if workloads else None
    if workload is None and prebuilt is not None:
        if adoptable is None:
            return gates.waiting(
                WorkloadWrites(), f"its Workload {prebuilt}, which MultiKueue makes, does not exist"
            )
        return gates.waiting(
            WorkloadWrites(adopt=(adoptable, adoption(job, adoptable))),
            f"adopting Workload {prebuilt}, which MultiKueue made for it",
        )
    if workload is None:
        create = None if pods_exist else render_workload(job, spec, queue, priority_label)
        return gates.waiting(WorkloadWrites(create=create))
    if workload.finished:
        return gates.waiting(
            WorkloadWrites(), f"its Workload {workload.name} has finished: it cannot run again"
        )
    if dict(workload.pod_sets) != pod_sets(spec):
        if prebuilt is not None:
            return gates.waiting(
                WorkloadWrites(), f"its Workload {workload.name} does not match its replicas"
            )
        return gates.waiting(WorkloadWrites(delete=withdrawn(workloads, "the replicas changed")))
    if workload.evicted is not None and workload.quota_reserved:
        release = None if pods_exist else (workload, released_status(workload, now))
        why = ": ".join(part for part in workload.evicted if part)
        return gates.evicted(WorkloadWrites(patch_status=release), why)
    if not workload.admitted:
        return gates.waiting(WorkloadWrites(), workload.not_admitted)
    found = placements(workload, flavors)
    if isinstance(found, str):
        return gates.waiting(WorkloadWrites(), found)
    return gates.opened(WorkloadWrites(), functools.partial(_place_by_pod_set, found))


def _place_by_pod_set(
    found: Mapping[str, Placement], pod: dict[str, Any], replica: Replica
) -> None:
    placement = found.get(replica.type.label)
    if placement is not None:
        place(pod, placement)


def withdrawn(
    workloads: Sequence[WorkloadObservation], why: str
) -> list[tuple[WorkloadObservation, str]]:
    """The job's Workloads to delete, and why: it leaves the queue (suspended), or queues
    again with new pod sets."""
    return [(w, why) for w in workloads]


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


#: A ResourceFlavor read for an admission is read again after this long.
FLAVOR_TTL_SECONDS: Final = 30.0
#: Dispatched jobs whose last report is remembered: the oldest is forgotten past this many
#: (and reported again, once, if it changes).
MAX_REPORTED: Final = 10_000
#: A job whose Workload names a priority class that does not exist looks again this often.
MISSING_CLASS_RETRY_SECONDS: Final = 10.0


def read_workload(body: Mapping[str, Any]) -> tuple[str, JobKey, WorkloadObservation] | None:
    """Reads a Kueue Workload into its record, filed under the TFJob that owns it."""
    metadata = body["metadata"]
    owner = next((r for r in metadata.get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None or owner.get("kind") != "TFJob":
        return None
    key = (metadata["namespace"], owner["name"])
    return metadata["uid"], key, observe_workload(body)


@dataclass(frozen=True)
class Queued:
    """What a decision reads of Kueue for one job: the job's Workloads, and the
    ResourceFlavors an admitted one names."""

    workloads: tuple[WorkloadObservation, ...] = ()
    flavors: Mapping[str, FlavorObservation] = field(default_factory=dict)
    #: The Workload MultiKueue made for the job on this worker, read while not yet adopted.
    prebuilt: WorkloadObservation | None = None
    #: Where MultiKueue ran the job when the operator last reported it (manager side).
    reported: Dispatch | None = None

    def queued_here(self, job: JobView) -> bool:
        """Queued in Kueue with the operator as its job controller (on_operators_route)."""
        return job.queue is not None and on_operators_route(job.ref.api, self.workloads)

    def not_admitted(self) -> str | None:
        return next((w.not_admitted for w in self.workloads), None)


class KueueApi(Protocol):
    """The writes and reads of Kueue's objects (kube.Kube)."""

    async def create_workload(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def delete_workload(self, namespace: str, workload: WorkloadObservation) -> bool: ...
    async def read_resource_flavor(self, name: str) -> FlavorObservation | None: ...
    async def read_workload(self, namespace: str, name: str) -> WorkloadObservation | None: ...
    async def patch_workload(
        self,
        namespace: str,
        workload: WorkloadObservation,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> None: ...
    async def patch_job(
        self, job: JobRef, resource_version: str, patch: Mapping[str, Any]
    ) -> None: ...
    async def read_priority_class(self, kind: str, name: str) -> int | None: ...
    async def list_priority_classes(self) -> list[PriorityClass]: ...


class Kueue(Integration[Queued, WorkloadWrites]):
    """A queued job waits, Suspended, for its Workload's admission (the module's doc)."""

    name = "kueue"
    stage = Stage.JOB

    def __init__(self) -> None:
        #: ResourceFlavors read for admissions, with when they were read (monotonic).
        self._flavors: dict[str, tuple[float, FlavorObservation | None]] = {}
        #: Where MultiKueue ran each dispatched job when last reported, by job uid.
        self._reported: dict[str, Dispatch] = {}

    def watches(self) -> Sequence[Watched]:
        # Kueue may not be installed: the watch is optional.
        resource = Resource("workloads", KUEUE_WORKLOADS_PATH, KUEUE_JOB_UID_LABEL, optional=True)
        return (Watched(resource, read_workload),)

    async def observe(self, job: JobView, records: Sequence[Any], reads: Any, now: float) -> Queued:
        """The job's Workloads, and the ResourceFlavors its admitted one names, read at
        most every FLAVOR_TTL_SECONDS; one that does not exist is left out."""
        workloads = tuple(w for w in records if w.owner_uid == job.ref.uid)
        api: KueueApi = reads
        # A dispatched job's pods are placed on its worker cluster, never here.
        placed_here = job.managed_by is None
        names = {
            name
            for w in workloads
            if placed_here and w.admitted and not w.finished
            for names in w.flavors.values()
            for name in names
        }
        for name in names:
            read = self._flavors.get(name)
            if read is None or now - read[0] > FLAVOR_TTL_SECONDS:
                self._flavors[name] = (now, await api.read_resource_flavor(name))
        flavors = {name: flavor for name in names if (flavor := self._flavors[name][1])}
        prebuilt = None
        if job.prebuilt_workload is not None and not workloads:
            prebuilt = await api.read_workload(job.ref.namespace, job.prebuilt_workload)
        return Queued(workloads, flavors, prebuilt, self._reported.get(job.ref.uid))

    def gate(
        self, job: JobView, spec: JobSpec, observed: Queued, *, pods_exist: bool, now: str
    ) -> Gate[WorkloadWrites] | None:
        if not observed.queued_here(job):
            return None
        return _admission(job, spec, observed, pods_exist, now)

    def dispatched(
        self, job: JobView, spec: JobSpec, observed: Queued, now: datetime
    ) -> Settled[WorkloadWrites] | None:
        """A job MultiKueue runs elsewhere (the module's doc): its Workload, made once
        spec.managedBy says MultiKueue, and events of where it runs."""
        if job.queue is None:
            message = (
                f"managedBy {job.managed_by} leaves the job to MultiKueue, but it has no "
                f"{KUEUE_QUEUE_LABEL} label: Kueue never admits it, so nothing runs it"
            )
            return Settled(WorkloadWrites(), events=(Event(WARNING, "NotQueued", message),))
        if spec.run_policy.suspend or not observed.queued_here(job):
            # Kueue's own route (its Kubeflow integration suspends the job at creation and
            # makes the Workload, with its own MultiKueue adapter): nothing is the operator's.
            return None
        if job.spec.get("managedBy") != job.managed_by:
            return Settled(WorkloadWrites(managed_by=job.managed_by))
        gate = _admission(job, spec, observed, False, to_rfc3339(now))
        workload = next((w for w in observed.workloads if not w.finished), None)
        if workload is None:
            return Settled(gate.writes)
        dispatch = Dispatch.of(workload, observed.reported)
        events = dispatch_events(observed.reported, dispatch, workload.name)
        return Settled(dataclasses.replace(gate.writes, dispatch=dispatch), events=events)

    def suspended_why(
        self, job: JobView, spec: JobSpec, observed: Queued, gate: Gate[WorkloadWrites] | None
    ) -> str | None:
        name = f"TFJob {job.ref.namespace}/{job.ref.name}"
        if gate is not None and gate.passage is Passage.EVICTED:
            return (
                f"{name} is suspended: Kueue took its admission back ({gate.why}); it is "
                "queued again once its pods are gone."
            )
        if job.queue is None or (observed.queued_here(job) and spec.run_policy.suspend):
            return None
        message = (
            f"{name} is suspended: queued in Kueue's LocalQueue {job.queue} until it is admitted."
        )
        not_admitted = (gate.why if gate is not None else None) or observed.not_admitted()
        if not_admitted:
            message += f" Kueue: {not_admitted}"
        return message

    def settle(
        self,
        job: JobView,
        spec: JobSpec | None,
        observed: Queued,
        outcome: Outcome,
        gate: Gate[WorkloadWrites] | None,
    ) -> Settled[WorkloadWrites] | None:
        """A finished job's Workload is marked Finished, which gives its quota back; a job
        suspended by its spec leaves the queue."""
        if not observed.queued_here(job):
            return None
        if outcome.finished:
            workload = next((w for w in observed.workloads if not w.finished), None)
            if workload is None:
                return None
            patch = finished_status(
                workload, outcome.succeeded, outcome.message, to_rfc3339(outcome.now)
            )
            return Settled(WorkloadWrites(patch_status=(workload, patch)))
        if outcome.suspended_by_spec:
            return Settled(
                WorkloadWrites(delete=withdrawn(observed.workloads, "the TFJob is suspended"))
            )
        return None if gate is None else Settled(gate.writes)

    async def apply(self, job: JobView, writes: WorkloadWrites, host: Host) -> float | None:
        """The job's spec.managedBy mirror; where MultiKueue runs it, remembered; then the
        Workload adopted, those deleted, the status patch, the Workload to create with its
        priority."""
        api: KueueApi = host.api
        namespace = job.ref.namespace
        if writes.managed_by is not None:
            patch = {"spec": {"managedBy": writes.managed_by}}
            await api.patch_job(job.ref, job.resource_version, patch)
        if writes.dispatch is not None:
            self._reported.pop(job.ref.uid, None)
            self._reported[job.ref.uid] = writes.dispatch
            while len(self._reported) > MAX_REPORTED:
                del self._reported[next(iter(self._reported))]
        if writes.adopt is not None:
            workload, patch = writes.adopt
            await api.patch_workload(namespace, workload, patch)
        for workload, why in writes.delete:
            if await api.delete_workload(namespace, workload):
                host.record_deleted("Workload", workload.name, why)
        if writes.patch_status is not None:
            workload, patch = writes.patch_status
            await api.patch_workload(namespace, workload, patch, status=True)
        body = writes.create
        if body is None:
            return None
        ref = body["spec"].get("priorityClassRef")
        priority = await _workload_priority(api, ref)
        if priority is None:
            assert ref is not None
            message = (
                f"{ref['kind']} {ref['name']} does not exist: the job's Workload is made "
                "once it does"
            )
            host.record(Event(WARNING, "FailedCreateWorkload", message))
            return MISSING_CLASS_RETRY_SECONDS
        await host.create_prerequisite(
            with_priority(body, priority),
            api.create_workload,
            missing="is Kueue installed? The job waits for its Workload",
            created=f"in LocalQueue {body['spec']['queueName']}: the job runs once Kueue admits it",
        )
        return None


def _admission(
    job: JobView, spec: JobSpec, observed: Queued, pods_exist: bool, now: str
) -> Gate[WorkloadWrites]:
    """`admission` of a queued job, from what the integration observed."""
    assert job.queue is not None
    return admission(
        job.ref,
        spec,
        job.queue,
        job.priority_class,
        observed.workloads,
        observed.flavors,
        pods_exist=pods_exist,
        now=now,
        prebuilt=job.prebuilt_workload,
        adoptable=observed.prebuilt,
    )


async def _workload_priority(
    api: KueueApi, ref: Mapping[str, str] | None
) -> tuple[Mapping[str, str] | None, int] | None:
    """The priority of a Workload about to be made, as Kueue reads it for the Workloads it
    makes: the value of the class `ref` names, else the cluster's default
    (default_priority). None if the class named does not exist; a class the operator may
    not read (a namespaced install) counts 0."""
    try:
        if ref is None:
            return default_priority(await api.list_priority_classes())
        value = await api.read_priority_class(ref["kind"], ref["name"])
    except ApiError as error:
        if error.status != 403:
            raise
        return ref, 0
    return None if value is None else (ref, value)
