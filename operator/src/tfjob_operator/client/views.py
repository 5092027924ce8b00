"""A TFJob and its replicas as the client shows them: read-only views over the API's dicts.

`TFJob` wraps the object the API server returned (`.object`, unchanged) and reads the
facts a person asks about: its state, the reason and message behind it, whether it has
finished. `Replica` is one pod of it, named as TF_CONFIG and `kubectl get pods` name it
(`worker-1`), with its phase and, when it is not simply running, why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import conditions
from ..api import (
    CONTAINER_NAME,
    KUBEFLOW_LABEL_REPLICA_INDEX,
    KUBEFLOW_LABEL_REPLICA_TYPE,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    MULTIKUEUE,
    ConditionType,
    manager_of,
)
from ..observe import observe_workload
from ..timeutil import from_rfc3339

#: The states `wait` ends on by default: the job will not change by itself after them.
FINISHED = (ConditionType.SUCCEEDED.value, ConditionType.FAILED.value)


@dataclass(frozen=True)
class TFJob:
    """A TFJob as the API server last returned it."""

    object: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.object["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.object["metadata"].get("namespace", ""))

    @property
    def api_version(self) -> str:
        return str(self.object.get("apiVersion", ""))

    @property
    def uid(self) -> str:
        return str(self.object["metadata"].get("uid", ""))

    @property
    def conditions(self) -> Sequence[Mapping[str, Any]]:
        return list((self.object.get("status") or {}).get("conditions") or [])

    @property
    def tensorboard(self) -> Mapping[str, Any]:
        """`status.tensorboard`: name, url (in the cluster), ready, removeAfter, or the
        message saying why it cannot run; empty when the job has none (yet)."""
        return dict((self.object.get("status") or {}).get("tensorboard") or {})

    @property
    def state(self) -> str:
        """Created, Running, Restarting, Suspended, Succeeded or Failed (`kubectl get`'s)."""
        return conditions.state(self.conditions)

    @property
    def reason(self) -> str:
        """The reason of the condition behind the state (for Running: why it waits, when
        it is False: FailedCreatePod, CrashLoopBackOff, GangUnschedulable, ...)."""
        return str(self._state_condition().get("reason", ""))

    @property
    def message(self) -> str:
        return str(self._state_condition().get("message", ""))

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.state == ConditionType.SUCCEEDED.value

    @property
    def created(self) -> datetime | None:
        stamp = self.object["metadata"].get("creationTimestamp")
        return from_rfc3339(stamp) if stamp else None

    @property
    def managed_by(self) -> str | None:
        """The controller that runs the job if not this operator (spec.managedBy, or
        Kubeflow's runPolicy.managedBy): MultiKueue runs it on a worker cluster."""
        return manager_of(self.object)

    @property
    def replica_counts(self) -> dict[str, int]:
        """Replicas asked for, by type (`{"Worker": 2, "PS": 1}`)."""
        specs = (self.object.get("spec") or {}).get("tfReplicaSpecs") or {}
        return {kind: int(spec.get("replicas", 1)) for kind, spec in specs.items()}

    def _state_condition(self) -> Mapping[str, Any]:
        state = self.state
        if state == ConditionType.CREATED.value:
            # Not running yet: the Running condition, False, says why when there is one.
            running = conditions.find(self.conditions, ConditionType.RUNNING)
            return running or conditions.find(self.conditions, ConditionType.CREATED) or {}
        return conditions.find(self.conditions, ConditionType(state)) or {}


@dataclass(frozen=True)
class Dispatch:
    """Where another controller runs a job: for MultiKueue, the worker cluster its
    Workload here was dispatched to (None while it waits), and Kueue's admission checks."""

    manager: str
    cluster: str | None = None
    workload: str | None = None
    #: Each admission check's name, state and message.
    checks: tuple[tuple[str, str, str], ...] = ()
    #: Why Kueue has not reserved quota for it on this cluster, in Kueue's words.
    pending: str = ""

    @classmethod
    def of(cls, manager: str, workload: Mapping[str, Any] | None) -> Dispatch:
        """From the job's Workload on this cluster, read as the operator reads it."""
        if workload is None:
            return cls(manager)
        seen = observe_workload(workload)
        return cls(manager, seen.cluster_name, seen.name, seen.checks, seen.not_admitted or "")

    @property
    def where(self) -> str:
        """`worker cluster worker-b (MultiKueue)`, or what it waits for."""
        if self.manager != MULTIKUEUE:
            return f"not here: managed by {self.manager}"
        if self.cluster:
            return f"worker cluster {self.cluster} (MultiKueue)"
        if self.workload:
            waits = f"no worker cluster yet: Workload {self.workload} waits for MultiKueue"
            return f"{waits} (Kueue: {self.pending})" if self.pending else waits
        return "no worker cluster yet: no Workload (is it queued, is the operator running?)"

    @property
    def elsewhere(self) -> str:
        """Why its pods and logs are not in this cluster, and where to read them."""
        if self.cluster:
            return (
                f"runs on {self.where}: its pods and their logs are in that cluster; "
                "pass its kubeconfig (--kubeconfig, or TFJobClient(kubeconfig=...))"
            )
        return f"has no pods in this cluster: {self.where}"


@dataclass(frozen=True)
class Replica:
    """One pod of a TFJob."""

    name: str
    pod: str
    phase: str
    #: Why the training container waits or ended, when it is not simply running.
    reason: str
    message: str
    exit_code: int | None
    restarts: int
    node: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> Replica:
        metadata, status = pod["metadata"], pod.get("status") or {}
        labels = metadata.get("labels") or {}
        kind = labels.get(LABEL_REPLICA_TYPE) or labels.get(KUBEFLOW_LABEL_REPLICA_TYPE, "")
        index = labels.get(LABEL_REPLICA_INDEX) or labels.get(KUBEFLOW_LABEL_REPLICA_INDEX, "")
        container = training_container_status(pod) or {}
        reason, message, exit_code = _why(status, container)
        return cls(
            name=f"{kind}-{index}" if kind else str(metadata["name"]),
            pod=str(metadata["name"]),
            phase=str(status.get("phase", "Pending")),
            reason=reason,
            message=message,
            exit_code=exit_code,
            restarts=int(container.get("restartCount", 0)),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
        )

    @property
    def summary(self) -> str:
        """`Running`, `Pending (ContainerCreating)`, `Failed (Error, exit code 1)`."""
        reason = "" if self.reason == "Completed" else self.reason
        details = [part for part in (reason, _exit(self.exit_code)) if part]
        text = self.phase + (f" ({', '.join(details)})" if details else "")
        if self.restarts:
            text += f", {self.restarts} restart(s)"
        return text


def training_container_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The status of the container TensorFlow runs in (the one receiving TF_CONFIG), or of
    the pod's first container when none has that name."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == CONTAINER_NAME), None) or (
        statuses[0] if statuses else None
    )


def _why(status: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, str, int | None]:
    for init in status.get("initContainerStatuses") or []:
        waiting = (init.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") != "PodInitializing":
            reason = f"init container {init['name']}: {waiting.get('reason', '')}"
            return reason, waiting.get("message", ""), None
    state = container.get("state") or {}
    if state.get("waiting"):
        waiting = state["waiting"]
        last = (container.get("lastState") or {}).get("terminated") or {}
        return waiting.get("reason", ""), waiting.get("message", ""), last.get("exitCode")
    if state.get("terminated"):
        ended = state["terminated"]
        return ended.get("reason", ""), ended.get("message", ""), ended.get("exitCode")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("reason", ""), condition.get("message", ""), None
    return "", "", None


def _exit(code: int | None) -> str:
    return f"exit code {code}" if code else ""
