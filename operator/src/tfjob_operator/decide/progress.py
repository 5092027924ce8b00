"""What the status says of a job under way (running, or why not yet), and the status a
decision ends with: the job's own fields, each integration's part, and how soon it is
written."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import conditions as cond
from .. import status as status_of
from ..api import ConditionType, ReplicaType
from ..events import WARNING, Event
from ..integrations.base import Integration, Outcome, Stage
from ..observe import PodObservation
from ..plan import Plan, soonest
from ..refusals import Refusal
from ..spec import JobSpec, Replica
from ..timeutil import to_rfc3339
from .draft import Draft
from .outcomes import refusal_deadline, refusal_since
from .seen import Seen

#: Running=False once nothing keeps the job's pods from running any more (an image found,
#: a refused pod accepted), until they all run.
REPLICAS_STARTING = "ReplicasStarting"


def created(seen: Seen, draft: Draft) -> Draft:
    """Created=True, once."""
    if draft.condition(ConditionType.CREATED) is not None:
        return draft
    return draft.setting(
        seen, ConditionType.CREATED, True, "TFJobCreated", f"TFJob {seen.id} is created."
    )


def report_progress(
    seen: Seen,
    draft: Draft,
    desired: Mapping[str, Replica],
    current: Mapping[str, PodObservation],
    stale: Sequence[PodObservation],
    refused: Sequence[Refusal],
) -> Draft:
    """Running: True once every training replica runs; else False with why, from a refusal
    of the API server's (`refused`, in the order outcomes.refused gives them), a waiting
    pod's reason, or a gang's."""
    training = [
        key
        for key, r in desired.items()
        if r.type is not ReplicaType.EVALUATOR and not draft.succeeded_in(r)
    ]
    if refused:
        return _refused(seen, draft, refused)
    all_running = all(key in current and current[key].running for key in training)
    if all_running and not stale:
        return draft.setting(
            seen, ConditionType.RUNNING, True, "TFJobRunning", f"TFJob {seen.id} is running."
        )
    if draft.is_true(ConditionType.RESTARTING):
        return draft
    waiting = [
        (key, current[key])
        for key in sorted(current)
        if current[key].waiting_reason is not None and current[key].active
    ]
    said: tuple[str, str] | None = None
    series = ""
    if waiting:
        key, pod = waiting[0]
        reason = pod.waiting_reason or "Pending"
        message = f"{key} is {'pending' if pod.phase == 'Pending' else 'waiting'}: {reason}"
        if pod.waiting_message:
            message += f": {pod.waiting_message}"
        said, series = (reason, message), key
    for observation in seen.at(Stage.PODS):
        own = observation.integration.pods_wait_why(seen.job, observation.observed, said)
        if own is not None:
            said, series = own, observation.integration.name
            break
    if said is None:
        return _starting(seen, draft)
    reason, message = said
    # An event on the transition only: the message follows whichever pod the scheduler
    # reported on last, and must not repeat the event each time. The kubelet's reasons
    # alternate (ErrImagePull, ImagePullBackOff): each one's events of a replica are one
    # Event with a count (the series).
    before = draft.condition(ConditionType.RUNNING)
    if before is None or (before.get("status"), before.get("reason")) != ("False", reason):
        draft = draft.reporting(WARNING, reason, message, series=series)
    return draft.setting(seen, ConditionType.RUNNING, False, reason, message)


def _refused(seen: Seen, draft: Draft, refused: Sequence[Refusal]) -> Draft:
    first = refused[0]
    message = first.describe()
    if first.permanent:
        message += (
            f"; the TFJob fails at {to_rfc3339(refusal_deadline(seen, first))} "
            "unless its spec is changed"
        )
    others = sorted({r.replica for r in refused[1:]} - {first.replica})
    if others:
        message += f" (also refused: {', '.join(others)})"
    # No event here: the controller records each refusal as it happens.
    return draft.setting(
        seen,
        ConditionType.RUNNING,
        False,
        first.condition_reason,
        message,
        since=to_rfc3339(refusal_since(seen, first)),
    )


def _starting(seen: Seen, draft: Draft) -> Draft:
    """Nothing keeps the pods from running: a Running=False that said why is stale."""
    before = draft.condition(ConditionType.RUNNING)
    if before is None or before.get("status") != "False":
        return draft
    return draft.setting(
        seen,
        ConditionType.RUNNING,
        False,
        REPLICAS_STARTING,
        f"TFJob {seen.id}: its pods are created and starting.",
    )


def plan(seen: Seen, spec: JobSpec | None, draft: Draft) -> Plan:
    """The plan of the finished draft: the status, with each integration's part, goes in
    only if something in it changed."""
    old = seen.job.status
    replicas = status_of.replica_statuses(
        seen.ref,
        list(spec.replica_specs) if spec else [],
        seen.pods,
        draft.succeeded,
        draft.restarts_by_type,
        creating=draft.creating,
        deleting={d.uid for d in draft.delete_pods},
    )
    conditions = list(draft.conditions)
    status: dict[str, Any] = {
        "conditions": conditions,
        "state": cond.state(conditions),
        "replicaStatuses": replicas,
        **status_of.totals(replicas),
        "restartCount": draft.restart_count,
        "replicaGenerations": dict(draft.generations),
        "observedGeneration": seen.job.generation,
    }
    if draft.start_time:
        status["startTime"] = draft.start_time
    if draft.completion_time:
        status["completionTime"] = draft.completion_time
    if draft.checkpoint:
        status["checkpoint"] = dict(draft.checkpoint)
    previous = {k: v for k, v in old.items() if k != "lastReconcileTime"}
    owned = {i.status_field for i in _integrations(seen) if i.status_field is not None}
    reconciled = status != {k: v for k, v in previous.items() if k not in owned}
    settled = _settle(seen, spec, draft, status)
    status, beside = settled.status, settled.events
    new_status: dict[str, Any] | None = None
    write = status_of.StatusWrite.PROGRESS
    if status != previous:
        # The job's own fields changed: a reconcile to record. An integration's field
        # alone goes in a patch of its own.
        last = seen.now_text if reconciled else old.get("lastReconcileTime")
        if last is not None:
            status["lastReconcileTime"] = last
        new_status = status
        # An event reports a transition the status records: written with it, or the
        # next decision, reading the old status, would report it again.
        write = (
            status_of.StatusWrite.DECISION
            if draft.events
            else status_of.status_write(previous, status)
        )
        if beside and write is status_of.StatusWrite.PROGRESS:
            write = status_of.StatusWrite.TRANSITION
    return Plan(
        status=new_status,
        create_pods=draft.create_pods,
        delete_pods=draft.delete_pods,
        create_services=draft.create_services,
        delete_services=draft.delete_services,
        events=(*draft.events, *beside),
        requeue_after=settled.requeue_after,
        delete_job=draft.delete_job,
        integration_writes=settled.writes,
        restarted=draft.restarted,
        status_write=write,
    )


@dataclasses.dataclass(frozen=True)
class _Settled:
    """The integrations' part of a plan."""

    #: The status with each integration's field.
    status: dict[str, Any]
    #: Their events: not the job's transitions.
    events: tuple[Event, ...]
    writes: tuple[tuple[Integration[Any, Any], Any], ...]
    requeue_after: float | None


def _settle(seen: Seen, spec: JobSpec | None, draft: Draft, status: Mapping[str, Any]) -> _Settled:
    """Each integration's part, once the job's status is decided: its writes, its field
    of the status, its events, and when it looks again."""
    finished = draft.finished
    succeeded = draft.is_true(ConditionType.SUCCEEDED)
    ending = draft.condition(ConditionType.SUCCEEDED if succeeded else ConditionType.FAILED)
    outcome = Outcome(
        status=dict(status),
        finished=finished,
        succeeded=succeeded,
        suspended=draft.is_true(ConditionType.SUSPENDED),
        suspended_by_spec=not finished and spec is not None and spec.run_policy.suspend,
        message=str((ending or {}).get("message") or "") if finished else "",
        now=seen.now,
    )
    old = seen.job.status
    with_fields = dict(status)
    events: list[Event] = []
    writes: list[tuple[Integration[Any, Any], Any]] = []
    requeue_after = draft.requeue_after
    for observation in seen.observations:
        integration = observation.integration
        settled = integration.settle(
            seen.job, spec, observation.observed, outcome, draft.gates.get(integration.name)
        )
        field_name = integration.status_field
        if field_name is not None and field_name in old:
            with_fields[field_name] = old[field_name]
        if settled is None:
            continue
        writes.append((integration, settled.writes))
        if field_name is not None:
            with_fields.pop(field_name, None)
            if settled.status is not None:
                with_fields[field_name] = dict(settled.status)
        events += settled.events
        requeue_after = soonest(requeue_after, settled.requeue_after)
    return _Settled(with_fields, tuple(events), tuple(writes), requeue_after)


def _integrations(seen: Seen) -> list[Integration[Any, Any]]:
    return [observation.integration for observation in seen.observations]
