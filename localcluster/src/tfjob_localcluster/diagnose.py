"""What a stalled workload looks like, in a few lines a person can act on.

For each pod: its phase, why a container waits or ended (`CrashLoopBackOff` with the
last exit code and reason, `ErrImageNeverPull`, `Unschedulable` with the scheduler's
message), its restarts, its last events and the last lines of its log (the previous
container's when the current one has not started). The trainer logs which peers it is
still waiting for (tfjob_trainer.peers), so for TensorFlow the last log lines say which
replica waits for which peer. Used by `make demo` when it sees no progress and by the
e2e tests when one fails.

    print(describe_pods(Rest.of_kubeconfig(kubeconfig), "demo"))
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from tfjob_localcluster.errors import LocalClusterError
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.apiserver.sync import Rest

Obj = Mapping[str, Any]

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


def describe_pods(rest: Rest, namespace: str, selector: str | None = None) -> str:
    query = {"labelSelector": selector} if selector else None
    pods = rest.get(f"/api/v1/namespaces/{namespace}/pods", query).get("items") or []
    if not pods:
        return f"no pods in namespace {namespace}" + (f" matching {selector}" if selector else "")
    return "\n".join(describe_pod(rest, pod) for pod in sorted(pods, key=_name))


def _name(pod: Obj) -> str:
    return str(pod["metadata"]["name"])


def describe_pod(rest: Rest, pod: Obj) -> str:
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    lines = [f"pod/{name}: {(pod.get('status') or {}).get('phase')}{_unscheduled(pod)}"]
    for event in _events(rest, namespace, name)[-EVENTS:]:
        lines.append(f"  event {event.get('type')} {event.get('reason')}: {event.get('message')}")
    for status in _container_statuses(pod):
        lines.append(f"  container {status['name']}: {container_state(status)}")
        # A container waiting to be restarted has no log yet: its predecessor's says why.
        previous = bool((status.get("state") or {}).get("waiting") and status.get("restartCount"))
        for line in _log_tail(rest, namespace, name, status["name"], previous):
            lines.append(f"    log{' (previous)' if previous else ''}| {line}")
    return "\n".join(lines)


def _container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def container_state(status: Obj) -> str:
    state, last = status.get("state") or {}, status.get("lastState") or {}
    if waiting := state.get("waiting"):
        text = f"waiting, {waiting.get('reason')}"
        if waiting.get("message"):
            text += f": {waiting['message']}"
    elif terminated := state.get("terminated"):
        text = f"terminated, {terminated.get('reason')} (exit code {terminated.get('exitCode')})"
    elif "running" in state:
        text = "running" + ("" if status.get("ready") else ", not ready")
    else:
        text = "no state yet"
    if restarts := status.get("restartCount"):
        text += f"; {restarts} restart(s)"
    if ended := last.get("terminated"):
        text += f"; last ended {ended.get('reason')} (exit code {ended.get('exitCode')})"
    return text


def stuck(pod: Obj) -> str | None:
    """Why the pod cannot make progress by waiting, or None."""
    for status in _container_statuses(pod):
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        # One crash may be bad luck at start; CrashLoopBackOff after two is a pattern.
        if reason in STUCK_REASONS and (
            reason != "CrashLoopBackOff" or (status.get("restartCount") or 0) >= 2
        ):
            return f"{_name(pod)}: {reason}"
    return None


def _unscheduled(pod: Obj) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f" (not scheduled: {condition.get('reason')}: {condition.get('message')})"
    return ""


def _events(rest: Rest, namespace: str, name: str) -> list[Obj]:
    try:
        listed = rest.get(
            f"/api/v1/namespaces/{namespace}/events",
            {"fieldSelector": f"involvedObject.name={name}"},
        )
    except (ApiError, OSError):
        return []
    events: list[Obj] = listed.get("items") or []
    return sorted(
        events,
        key=lambda e: str(
            e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp")
        ),
    )


def _log_tail(rest: Rest, namespace: str, name: str, container: str, previous: bool) -> list[str]:
    query: dict[str, str | int | bool] = {
        "container": container,
        "tailLines": LOG_LINES,
        "previous": previous,
    }
    try:
        text = rest.text(f"/api/v1/namespaces/{namespace}/pods/{name}/log", query)
    except (ApiError, OSError):
        return []
    return [line[:300] for line in text.splitlines() if line.strip()][-LOG_LINES:]


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
