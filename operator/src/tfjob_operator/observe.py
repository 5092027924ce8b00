"""What the controller needs to know about a child pod or service, read from its object.

These small frozen records are what the watch-cache indexes hold, so that a thousand
TFJobs cost a thousand records, not a thousand full pod bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .api import (
    CONTAINER_NAME,
    LABEL_CLUSTER_DIGEST,
    LABEL_CONTROLLER_UID,
    LABEL_GENERATION,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    ReplicaType,
)
from .spec import Replica
from .stops import Stop, stop_of
from .timeutil import from_rfc3339

_TYPES_BY_LABEL = {t.label: t for t in ReplicaType}
#: Pod status reasons the kubelet sets when it, not the container, ended the pod.
#: Waiting reasons of a container on its way to run, which say nothing went wrong.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
_NODE_REASONS = frozenset(
    {"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "NodeLost"}
)


class RestartCause(StrEnum):
    """Why the operator restarted a job's replicas: the `reason` of its restart metric."""

    #: A container exited with a code its restart policy retries.
    EXIT_CODE = "ExitCode"
    #: Every failed pod was taken away (evicted, preempted, its node lost).
    DISRUPTED = "Disrupted"


@dataclass(frozen=True)
class Failure:
    """Why a pod ended unsuccessfully.

    `disrupted` means the pod was taken away (evicted, preempted, deleted by the node or by
    someone else) rather than its container exiting; TensorFlow can always resume from that.
    """

    exit_code: int | None
    reason: str
    message: str
    disrupted: bool
    #: The node the pod was on (a lost node's pods are evicted with a message that does
    #: not name it).
    node: str = ""
    #: The init container that failed, if the pod failed before its main container ran.
    init_container: str = ""

    def describe(self) -> str:
        if self.disrupted:
            where = f" on node {self.node}" if self.node else ""
            return (
                f"was disrupted ({self.reason}){where}{': ' + self.message if self.message else ''}"
            )
        if self.init_container:
            said = f": {_last_lines(self.message)}" if self.message else ""
            return f"init container {self.init_container} exited with code {self.exit_code}{said}"
        text = f"exited with code {self.exit_code}"
        if self.reason and self.reason != "Error":
            text += f" ({self.reason})"
        return text


@dataclass(frozen=True, slots=True)
class PodObservation:
    name: str
    uid: str
    owner_uid: str | None
    #: The TFJob uid in the child's labels: "" on children of an older operator.
    labelled_uid: str
    replica: Replica | None
    generation: int
    cluster_digest: str
    phase: str
    terminating: bool
    succeeded: bool
    failure: Failure | None
    container_restarts: int
    #: Why the pod does not run, if the scheduler or the kubelet says: Unschedulable, or a
    #: container's waiting reason (ErrImagePull, CreateContainerConfigError, CrashLoopBackOff
    #: after a restart, ...), with its message.
    waiting_reason: str | None
    waiting_message: str | None
    #: The checkpoint its container reported as it stopped (stops.py), if it did.
    stopped: Stop | None = None

    @property
    def active(self) -> bool:
        """Pending or running, its container neither done nor failed (a container that
        exited is done before the kubelet moves the phase on)."""
        return (
            not self.terminating
            and self.phase in ("Pending", "Running")
            and not self.succeeded
            and self.failure is None
        )

    @property
    def running(self) -> bool:
        """Running, and none of its containers waits for a reason the kubelet gave (a
        container in CrashLoopBackOff leaves the pod's phase Running)."""
        return self.active and self.phase == "Running" and self.waiting_reason is None


@dataclass(frozen=True, slots=True)
class ServiceObservation:
    name: str
    uid: str
    owner_uid: str | None
    labelled_uid: str
    replica: Replica | None


@dataclass(frozen=True, slots=True)
class WorkloadObservation:
    """What Kueue's Workload of a job says of its admission (integrations/kueue.py)."""

    name: str
    uid: str
    resource_version: str
    generation: int
    owner_uid: str | None
    #: Why Kueue has not reserved quota for the job, in Kueue's words (its QuotaReserved
    #: condition is False); None when it has, or has not said yet.
    not_admitted: str | None
    #: Quota reserved (QuotaReserved=True) and every admission check passed (Admitted=True).
    quota_reserved: bool = False
    admitted: bool = False
    #: Kueue's reason and message for taking the admission back (Evicted=True).
    evicted: tuple[str, str] | None = None
    finished: bool = False
    #: Replicas per pod set, as the Workload asks for them.
    pod_sets: Mapping[str, int] = field(default_factory=dict)
    #: The ResourceFlavors each pod set was admitted to.
    flavors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The pod sets admitted with a topology assignment (Kueue places their pods).
    topology_assigned: frozenset[str] = frozenset()
    conditions: tuple[Mapping[str, Any], ...] = ()
    #: Made by the operator (integrations/kueue.py), not by Kueue's own integration of the
    #: job's API.
    made_here: bool = False
    #: The worker cluster MultiKueue dispatched the job to (status.clusterName), if any.
    cluster_name: str | None = None
    #: Each admission check's name, state and message (MultiKueue's among them).
    checks: tuple[tuple[str, str, str], ...] = ()


def observe_workload(body: Mapping[str, Any]) -> WorkloadObservation:
    metadata = body["metadata"]
    status = body.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    reserved: Mapping[str, Any] = conditions.get("QuotaReserved") or {}
    refused = reserved.get("status") == "False" and reserved.get("message")
    evicted = conditions.get("Evicted") or {}
    assignments = (status.get("admission") or {}).get("podSetAssignments") or []
    return WorkloadObservation(
        name=str(metadata["name"]),
        uid=str(metadata["uid"]),
        resource_version=str(metadata.get("resourceVersion") or ""),
        generation=int(metadata.get("generation") or 0),
        owner_uid=controller_uid(metadata),
        not_admitted=str(reserved["message"]) if refused else None,
        quota_reserved=reserved.get("status") == "True",
        admitted=(conditions.get("Admitted") or {}).get("status") == "True",
        evicted=(
            (str(evicted.get("reason") or ""), str(evicted.get("message") or ""))
            if evicted.get("status") == "True"
            else None
        ),
        finished=(conditions.get("Finished") or {}).get("status") == "True",
        pod_sets={
            str(s["name"]): int(s.get("count") or 0)
            for s in (body.get("spec") or {}).get("podSets") or []
        },
        flavors={
            str(a["name"]): tuple(sorted(set((a.get("flavors") or {}).values())))
            for a in assignments
        },
        topology_assigned=frozenset(
            str(a["name"]) for a in assignments if a.get("topologyAssignment")
        ),
        conditions=tuple(status.get("conditions") or ()),
        made_here=LABEL_CONTROLLER_UID in (metadata.get("labels") or {}),
        cluster_name=status.get("clusterName") or None,
        checks=tuple(
            (str(c.get("name") or ""), str(c.get("state") or ""), str(c.get("message") or ""))
            for c in status.get("admissionChecks") or []
        ),
    )


@dataclass(frozen=True, slots=True)
class FlavorObservation:
    """What a Kueue ResourceFlavor puts on the pods admitted to it."""

    node_labels: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A PriorityClass, as Kueue reads one for a Workload's default priority."""

    name: str
    value: int
    global_default: bool


def observe_flavor(body: Mapping[str, Any]) -> FlavorObservation:
    spec = body.get("spec") or {}
    return FlavorObservation(
        node_labels=dict(spec.get("nodeLabels") or {}),
        tolerations=tuple(spec.get("tolerations") or ()),
    )


@dataclass(frozen=True, slots=True)
class PodGroupObservation:
    """A gang scheduler's PodGroup of a job (integrations/gang.py)."""

    name: str
    uid: str
    owner_uid: str | None
    api_version: str
    spec: Mapping[str, Any]
    #: Why the scheduler cannot place the gang, where the PodGroup says (Volcano's
    #: Unschedulable condition, until the group runs); scheduler-plugins says it on the pods.
    unschedulable: str | None


def observe_pod_group(body: Mapping[str, Any]) -> PodGroupObservation:
    metadata = body["metadata"]
    conditions = (body.get("status") or {}).get("conditions") or []
    unschedulable = next(
        (
            str(c.get("message") or c.get("reason") or "")
            for c in conditions
            if c.get("type") == "Unschedulable" and c.get("status") == "True"
        ),
        None,
    )
    if (body.get("status") or {}).get("phase") in ("Running", "Completed"):
        unschedulable = None
    return PodGroupObservation(
        name=str(metadata["name"]),
        uid=str(metadata["uid"]),
        owner_uid=controller_uid(metadata),
        api_version=str(body.get("apiVersion") or ""),
        spec=body.get("spec") or {},
        unschedulable=unschedulable or None,
    )


def controller_uid(metadata: Mapping[str, Any]) -> str | None:
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def replica_from_labels(labels: Mapping[str, str]) -> Replica | None:
    replica_type = _TYPES_BY_LABEL.get(labels.get(LABEL_REPLICA_TYPE, ""))
    index = labels.get(LABEL_REPLICA_INDEX, "")
    if replica_type is None or not index.isdigit():
        return None
    return Replica(replica_type, int(index))


def observe_service(body: Mapping[str, Any]) -> ServiceObservation:
    metadata = body.get("metadata") or {}
    return ServiceObservation(
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        owner_uid=controller_uid(metadata),
        labelled_uid=(metadata.get("labels") or {}).get(LABEL_CONTROLLER_UID, ""),
        replica=replica_from_labels(metadata.get("labels") or {}),
    )


def observe_pod(body: Mapping[str, Any]) -> PodObservation:
    metadata = body.get("metadata") or {}
    status = body.get("status") or {}
    labels = metadata.get("labels") or {}
    phase = status.get("phase") or "Pending"
    terminating = metadata.get("deletionTimestamp") is not None
    main = _main_container_status(status)
    generation = labels.get(LABEL_GENERATION, "0")
    waiting_reason, waiting_message = (
        _waiting(status) if phase in ("Pending", "Running") and not terminating else (None, None)
    )
    return PodObservation(
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        owner_uid=controller_uid(metadata),
        labelled_uid=labels.get(LABEL_CONTROLLER_UID, ""),
        replica=replica_from_labels(labels),
        generation=int(generation) if generation.isdigit() else 0,
        cluster_digest=labels.get(LABEL_CLUSTER_DIGEST, ""),
        phase=phase,
        terminating=terminating,
        succeeded=phase == "Succeeded" or _exited_zero(main),
        failure=_failure(status, main, phase, terminating, body.get("spec") or {}),
        container_restarts=sum(
            int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []
        ),
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        stopped=stop_of((main.get("state") or {}).get("terminated"))
        or stop_of((main.get("lastState") or {}).get("terminated")),
    )


def _main_container_status(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == CONTAINER_NAME:
            return dict(container)
    return {}


def _exited_zero(main: Mapping[str, Any]) -> bool:
    """Under restartPolicy Always the kubelet restarts even a container that exited 0."""
    for state_key in ("state", "lastState"):
        terminated = (main.get(state_key) or {}).get("terminated")
        if terminated and terminated.get("exitCode") == 0:
            return True
    return False


def _disruption(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """The kubelet's own reason (e.g. Evicted) is the most specific; else DisruptionTarget."""
    if status.get("reason") in _NODE_REASONS:
        return status["reason"], status.get("message") or ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return condition.get("reason") or "DisruptionTarget", condition.get("message") or ""
    return None


def _failure(
    status: Mapping[str, Any],
    main: Mapping[str, Any],
    phase: str,
    terminating: bool,
    spec: Mapping[str, Any],
) -> Failure | None:
    """Why the pod failed, if it did.

    Under restartPolicy Never (the replicas' ExitCode and Never policies), a main container
    that exited non-zero has failed: the kubelet reports its exit code first and moves the
    phase on only once the pod's sandbox is gone, and a node lost in between would leave
    the pod Running until it is evicted. An exit that came before the pod was disrupted
    (its container's finishedAt before the DisruptionTarget condition) decides: the
    eviction only took away a container that had already failed.
    """
    disruption = _disruption(status)
    node = spec.get("nodeName") or ""
    terminated: Mapping[str, Any] | None = (main.get("state") or {}).get("terminated")
    if (
        terminated is not None
        and (
            phase == "Failed"
            or (spec.get("restartPolicy") == "Never" and terminated.get("exitCode"))
        )
        and (disruption is None or _exited_before_disruption(terminated, status))
    ):
        return Failure(
            exit_code=terminated.get("exitCode"),
            reason=terminated.get("reason") or "Error",
            message=(terminated.get("message") or "").strip(),
            disrupted=False,
        )
    if phase == "Failed" and disruption is None and (init := _failed_init(status)) is not None:
        return init
    if phase == "Failed":
        reason, message = disruption or (
            status.get("reason") or "PodFailed",
            status.get("message") or "the pod failed before its container ran",
        )
        return Failure(None, reason, message, disrupted=True, node=node)
    if terminating and phase != "Succeeded":
        reason, message = disruption or ("PodDeleted", "the pod was deleted")
        return Failure(None, reason, message, disrupted=True, node=node)
    return None


def _failed_init(status: Mapping[str, Any]) -> Failure | None:
    """An init container that exited non-zero: the pod failed before its main container
    ran, and why is that container's (its termination message, or its log's tail where
    it falls back to the log)."""
    for container in status.get("initContainerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return Failure(
                exit_code=terminated["exitCode"],
                reason=terminated.get("reason") or "Error",
                message=(terminated.get("message") or "").strip(),
                disrupted=False,
                init_container=str(container.get("name") or ""),
            )
    return None


def _last_lines(text: str, limit: int = 300) -> str:
    """The end of a message on one line: an error's last lines say what went wrong."""
    joined = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return joined if len(joined) <= limit else "..." + joined[-(limit - 3) :]


def _exited_before_disruption(terminated: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the container finished before the DisruptionTarget condition was set (both
    in whole seconds; a tie goes to the disruption)."""
    finished = terminated.get("finishedAt")
    disrupted = next(
        (
            c.get("lastTransitionTime")
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if not finished or not disrupted:
        return False
    return from_rfc3339(str(finished)) < from_rfc3339(str(disrupted))


def _waiting(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The scheduler's reason when it cannot place the pod, else the first container that
    waits for a reason other than being created: init containers first (the others wait
    for them), then the TensorFlow container, then the others, whose name the message gives."""
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason")
        ):
            return condition["reason"], condition.get("message")
    containers = sorted(
        status.get("containerStatuses") or [], key=lambda c: c.get("name") != CONTAINER_NAME
    )
    for container in [*(status.get("initContainerStatuses") or []), *containers]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in _STARTING:
            message = waiting.get("message") or ""
            if container.get("name") != CONTAINER_NAME:
                message = f"container {container.get('name')}: {message}".rstrip(": ")
            return reason, message or None
    return None, None
