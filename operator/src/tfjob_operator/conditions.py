"""TFJob conditions, kept the way Kubernetes objects keep them.

Created stays True once set. Running, Restarting, Succeeded, Failed and Suspended describe
the job's phase: when one of them turns True, the others that are True turn False.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .api import ConditionType

_PHASE_TYPES = (
    ConditionType.RUNNING,
    ConditionType.RESTARTING,
    ConditionType.SUCCEEDED,
    ConditionType.FAILED,
    ConditionType.SUSPENDED,
)
_ORDER = (ConditionType.CREATED, *_PHASE_TYPES)

Condition = dict[str, Any]


def find(conditions: Sequence[Mapping[str, Any]], kind: ConditionType) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind.value), None)


def is_true(conditions: Sequence[Mapping[str, Any]], kind: ConditionType) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.get("status") == "True"


def is_finished(conditions: Sequence[Mapping[str, Any]]) -> bool:
    return is_true(conditions, ConditionType.SUCCEEDED) or is_true(conditions, ConditionType.FAILED)


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    kind: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: str,
    since: str | None = None,
) -> list[Condition]:
    """Returns the conditions with `kind` set; times move only when something changed.

    `since`, when given, is `kind`'s lastTransitionTime: the moment the state it reports
    began, for a state the status alone does not mark (a refusal of a pod, which keeps
    Running False but starts the grace of an invalid pod: decide/outcomes.py reads it back).
    """
    by_type = {c["type"]: dict(c) for c in conditions}
    _put(by_type, kind, status, reason, message, now, since)
    if status and kind in _PHASE_TYPES:
        for other in _PHASE_TYPES:
            if other is not kind and by_type.get(other.value, {}).get("status") == "True":
                _put(by_type, other, False, reason, message, now)
    return [by_type[t.value] for t in _ORDER if t.value in by_type]


def _put(
    by_type: dict[str, Condition],
    kind: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: str,
    since: str | None = None,
) -> None:
    value = "True" if status else "False"
    old = by_type.get(kind.value)
    transition_time = now
    if since is not None:
        transition_time = since
    elif old is not None and old.get("status") == value:
        transition_time = old.get("lastTransitionTime", now)
    if old and (
        old.get("status"),
        old.get("reason"),
        old.get("message"),
        old.get("lastTransitionTime"),
    ) == (value, reason, message, transition_time):
        return
    by_type[kind.value] = {
        "type": kind.value,
        "status": value,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": transition_time,
    }


def state(conditions: Sequence[Mapping[str, Any]]) -> str:
    """The one-word state printed by `kubectl get tfjobs`."""
    for kind in (
        ConditionType.FAILED,
        ConditionType.SUCCEEDED,
        ConditionType.SUSPENDED,
        ConditionType.RESTARTING,
        ConditionType.RUNNING,
    ):
        if is_true(conditions, kind):
            return kind.value
    return ConditionType.CREATED.value
