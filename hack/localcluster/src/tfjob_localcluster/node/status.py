"""Pod status as kubelet reports it, computed from the node's record of each container.

`ContainerRecord` is what the runtime knows about one container; `pod_status` turns
the records of a pod into the `status` object (phase by kubelet's rules, conditions,
container statuses) that the node writes to the API.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

# Condition types this node owns; others (PodScheduled, readiness gates) are kept.
NODE_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def waiting(reason: str, message: str | None = None) -> Obj:
    state: Obj = {"reason": reason}
    if message:
        state["message"] = message
    return {"waiting": state}


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


@dataclass
class ContainerRecord:
    """The runtime's view of one container (across restarts)."""

    name: str
    image: str
    state: Obj = field(default_factory=lambda: waiting("ContainerCreating"))
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str = ""
    image_id: str = ""

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> Obj | None:
        terminated: Obj | None = self.state.get("terminated")
        return terminated

    def to_status(self) -> Obj:
        status: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


@dataclass
class PodSnapshot:
    """Everything besides the spec that decides a pod's status."""

    host_ip: str
    pod_ip: str | None
    start_time: str
    sandbox_ready: bool
    init_containers: list[ContainerRecord]
    containers: list[ContainerRecord]
    terminal: bool = False
    # Set when the node itself fails the pod (eviction, admission, unsupported spec);
    # the phase turns Failed once the pod is terminal (all its containers stopped).
    failed: bool = False
    reason: str | None = None
    message: str | None = None
    extra_conditions: list[Obj] = field(default_factory=list)


def pod_phase(spec: Obj, snapshot: PodSnapshot) -> str:
    """kubelet's getPhase, on the node's container records."""
    pending_init = 0
    failed_init = 0
    for record in snapshot.init_containers:
        terminated = record.terminated
        last = record.last_state.get("terminated")
        if record.running:
            pending_init += 1
        elif terminated is not None:
            failed_init += terminated["exitCode"] != 0
        elif last is not None:
            failed_init += last["exitCode"] != 0
        else:
            pending_init += 1
    running = waiting_count = stopped = succeeded = 0
    for record in snapshot.containers:
        terminated = record.terminated
        if record.running:
            running += 1
        elif terminated is not None:
            stopped += 1
            succeeded += terminated["exitCode"] == 0
        elif record.last_state.get("terminated") is not None:
            stopped += 1
        else:
            waiting_count += 1
    restart_policy = spec.get("restartPolicy", "Always")
    if snapshot.failed and snapshot.terminal:
        return "Failed"
    if failed_init and restart_policy == "Never":
        return "Failed"
    if pending_init or failed_init:
        # Still initializing (or about to retry a failed init container).
        return "Failed" if snapshot.terminal else "Pending"
    if waiting_count:
        return "Pending" if not snapshot.terminal else "Failed"
    if running:
        return "Running"
    if stopped:
        if snapshot.terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _condition(
    kind: str, status: bool, previous: dict[str, Obj], reason: str = "", message: str = ""
) -> Obj:
    value = "True" if status else "False"
    old = previous.get(kind)
    condition: Obj = {
        "type": kind,
        "status": value,
        "lastProbeTime": None,
        "lastTransitionTime": (
            old["lastTransitionTime"]
            if old and old.get("status") == value and old.get("lastTransitionTime")
            else now()
        ),
    }
    if not status and reason:
        condition["reason"] = reason
    if not status and message:
        condition["message"] = message
    return condition


def _names(records: list[ContainerRecord]) -> str:
    return "[" + " ".join(record.name for record in records) + "]"


def pod_conditions(pod: Obj, snapshot: PodSnapshot, phase: str) -> list[Obj]:
    current = pod.get("status", {}).get("conditions") or []
    previous = {condition["type"]: condition for condition in current}
    terminal = phase in ("Succeeded", "Failed")

    incomplete_init = [
        record
        for record in snapshot.init_containers
        if not (record.terminated is not None and record.terminated["exitCode"] == 0)
    ]
    initialized = not incomplete_init or (terminal and not snapshot.init_containers)
    unready = [record for record in snapshot.containers if not record.ready]
    containers_ready = not unready and not terminal
    gates = [gate["conditionType"] for gate in pod["spec"].get("readinessGates") or []]
    missing_gates = [gate for gate in gates if (previous.get(gate) or {}).get("status") != "True"]

    if terminal:
        ready_reason, ready_message = "PodCompleted", ""
    elif unready:
        ready_reason = "ContainersNotReady"
        ready_message = f"containers with unready status: {_names(unready)}"
    else:
        ready_reason = "ReadinessGatesNotReady"
        ready_message = f'the status of pod readiness gates is not "True": {missing_gates}'

    owned = [
        _condition("PodReadyToStartContainers", snapshot.sandbox_ready, previous),
        _condition(
            "Initialized",
            initialized,
            previous,
            "PodCompleted" if terminal else "ContainersNotInitialized",
            "" if terminal else f"containers with incomplete status: {_names(incomplete_init)}",
        ),
        _condition(
            "ContainersReady",
            containers_ready,
            previous,
            ready_reason if not terminal else "PodCompleted",
            ready_message if unready and not terminal else "",
        ),
        _condition(
            "Ready",
            containers_ready and not missing_gates,
            previous,
            ready_reason,
            ready_message,
        ),
    ]
    owned_types = set(NODE_CONDITIONS) | {c["type"] for c in snapshot.extra_conditions}
    kept = [condition for condition in current if condition["type"] not in owned_types]
    return kept + owned + snapshot.extra_conditions


def pod_status(pod: Obj, snapshot: PodSnapshot) -> Obj:
    phase = pod_phase(pod["spec"], snapshot)
    status: Obj = {
        "phase": phase,
        "conditions": pod_conditions(pod, snapshot, phase),
        "hostIP": snapshot.host_ip,
        "hostIPs": [{"ip": snapshot.host_ip}],
        "startTime": snapshot.start_time,
        "containerStatuses": [record.to_status() for record in snapshot.containers],
    }
    if snapshot.pod_ip:
        status["podIP"] = snapshot.pod_ip
        status["podIPs"] = [{"ip": snapshot.pod_ip}]
    if snapshot.init_containers:
        status["initContainerStatuses"] = [r.to_status() for r in snapshot.init_containers]
    if snapshot.reason:
        status["reason"] = snapshot.reason
    if snapshot.message:
        status["message"] = snapshot.message
    return status
