"""What a stalled workload looks like, in a few lines a person can act on.

For each pod: its phase, why a container waits or ended (`CrashLoopBackOff` with the
last exit code and reason, `ErrImageNeverPull`, `Unschedulable` with the scheduler's
message), its restarts, its last events and the last lines of its log (the previous
container's when the current one has not started). The trainer logs which peers it is
still waiting for (tfjob_trainer.peers), so for TensorFlow the last log lines say which
replica waits for which peer. Used by `make demo` when it sees no progress and by the
e2e tests when one fails.

    print(describe_pods(core_v1, "demo"))
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tfjob_localcluster.errors import LocalClusterError

LOG_LINES = 6
EVENTS = 4
# Reasons a container will not get past by waiting.
STUCK_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImageNeverPull",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def describe_pods(core: client.CoreV1Api, namespace: str, selector: str | None = None) -> str:
    pods = core.list_namespaced_pod(namespace, label_selector=selector or "").items
    if not pods:
        return f"no pods in namespace {namespace}" + (f" matching {selector}" if selector else "")
    return "\n".join(describe_pod(core, pod) for pod in sorted(pods, key=_name))


def _name(pod: Any) -> str:
    return str(pod.metadata.name)


def describe_pod(core: client.CoreV1Api, pod: Any) -> str:
    name, namespace = pod.metadata.name, pod.metadata.namespace
    lines = [f"pod/{name}: {pod.status.phase}{_unscheduled(pod)}"]
    for event in _events(core, namespace, name)[-EVENTS:]:
        lines.append(f"  event {event.type} {event.reason}: {event.message}")
    for status in (pod.status.init_container_statuses or []) + (
        pod.status.container_statuses or []
    ):
        lines.append(f"  container {status.name}: {container_state(status)}")
        # A container waiting to be restarted has no log yet: its predecessor's says why.
        previous = bool(status.state.waiting and status.restart_count)
        for line in _log_tail(core, namespace, name, status.name, previous):
            lines.append(f"    log{' (previous)' if previous else ''}| {line}")
    return "\n".join(lines)


def container_state(status: Any) -> str:
    state, last = status.state, status.last_state
    if state.waiting:
        text = f"waiting, {state.waiting.reason}"
        if state.waiting.message:
            text += f": {state.waiting.message}"
    elif state.terminated:
        text = f"terminated, {state.terminated.reason} (exit code {state.terminated.exit_code})"
    elif state.running:
        text = "running" + ("" if status.ready else ", not ready")
    else:
        text = "no state yet"
    if status.restart_count:
        text += f"; {status.restart_count} restart(s)"
    if last and last.terminated:
        text += f"; last ended {last.terminated.reason} (exit code {last.terminated.exit_code})"
    return text


def stuck(pod: Any) -> str | None:
    """Why the pod cannot make progress by waiting, or None."""
    for status in (pod.status.init_container_statuses or []) + (
        pod.status.container_statuses or []
    ):
        waiting = status.state.waiting
        # One crash may be bad luck at start; CrashLoopBackOff after two is a pattern.
        if (
            waiting
            and waiting.reason in STUCK_REASONS
            and (waiting.reason != "CrashLoopBackOff" or status.restart_count >= 2)
        ):
            return f"{pod.metadata.name}: {waiting.reason}"
    return None


def _unscheduled(pod: Any) -> str:
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f" (not scheduled: {condition.reason}: {condition.message})"
    return ""


def _events(core: client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    try:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
    except client.ApiException:
        return []
    return sorted(
        events, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp
    )


def _log_tail(
    core: client.CoreV1Api, namespace: str, name: str, container: str, previous: bool
) -> list[str]:
    try:
        text = core.read_namespaced_pod_log(
            name, namespace, container=container, tail_lines=LOG_LINES, previous=previous
        )
    except client.ApiException:
        return []
    return [line[:300] for line in str(text).splitlines() if line.strip()][-LOG_LINES:]


class StallError(LocalClusterError):
    """Something stopped making progress; the message holds the diagnosis."""


class StallWatch:
    """Notes each sign of progress; `check()` raises StallError after `limit` seconds
    without one, so a stall is reported well within a minute of its start."""

    def __init__(self, limit: float = 45.0) -> None:
        self.limit = limit
        self.last_seen: object = None
        self.since = time.monotonic()

    def observe(self, state: object) -> None:
        """`state`: whatever shows progress when it changes (phases, log lines, ...)."""
        if state != self.last_seen:
            self.last_seen = state
            self.since = time.monotonic()

    def stalled_for(self) -> float:
        return time.monotonic() - self.since

    def check(self, what: str, diagnosis: Callable[[], str]) -> None:
        if self.stalled_for() > self.limit:
            raise StallError(f"{what}: no progress for {self.stalled_for():.0f} s\n{diagnosis()}")
