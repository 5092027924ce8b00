"""How a job ends, restarts or waits: success, failure (a replica's, the back-off limit, the
deadline, a child refused for good, an invalid spec, a name taken), a restart counted once,
suspension, and the TTL after the end. Each takes the draft and returns the next one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime

from .. import conditions as cond
from ..api import CleanPodPolicy as Clean
from ..api import ConditionType, JobRef, ReplicaType
from ..events import NORMAL, WARNING
from ..failure_policy import past_backoff_limit, restart_group
from ..integrations.base import Stage
from ..job_view import JobView
from ..observe import Failure, PodObservation, RestartCause
from ..refusals import Refusal
from ..spec import REPLICA_ORDER, InvalidSpec, JobSpec, Replica
from ..stops import pending_stop
from ..timeutil import from_rfc3339
from .children import clean_up, delete_all
from .draft import Draft
from .seen import Seen

#: The reason a TFJob fails with when a TFJob of the other API group holds its name.
NAME_TAKEN = "NameTaken"


def training_finished(
    seen: Seen, spec: JobSpec, draft: Draft, current: Mapping[str, PodObservation]
) -> Draft:
    """The chief (or worker 0, or all workers) succeeded: the job's result is decided.

    ps and workers of a ParameterServerStrategy job never exit, so the clean-up policy
    deletes them now. A running evaluator is left to evaluate the final checkpoint and
    exit by itself: the job is Succeeded once it has.
    """
    leader = spec.leader()
    assert leader is not None
    evaluator = next(
        (p for p in current.values() if p.replica and p.replica.type is ReplicaType.EVALUATOR),
        None,
    )
    policy = spec.run_policy.clean_pod_policy
    if evaluator is not None and evaluator.running:
        draft = clean_up(seen, draft, policy, finished=False, keep=frozenset({evaluator.name}))
        return draft.setting(
            seen,
            ConditionType.RUNNING,
            True,
            "TrainingFinished",
            f"{leader.key} succeeded; waiting for the evaluator to evaluate the final checkpoint",
        )
    draft = (
        clean_up(seen, draft, policy, finished=True)
        .completed(seen)
        .setting(
            seen,
            ConditionType.SUCCEEDED,
            True,
            "TFJobSucceeded",
            f"TFJob {seen.id} successfully completed.",
        )
        .reporting(NORMAL, "TFJobSucceeded", f"{leader.key} succeeded: the TFJob is complete")
    )
    return expire(seen, spec, draft)


def fail(seen: Seen, spec: JobSpec, draft: Draft, reason: str, message: str) -> Draft:
    draft = (
        draft.completed(seen)
        .setting(seen, ConditionType.FAILED, True, reason, message)
        .reporting(WARNING, reason, message)
    )
    draft = clean_up(seen, draft, spec.run_policy.clean_pod_policy, finished=True)
    return expire(seen, spec, draft)


def invalid(seen: Seen, draft: Draft, error: InvalidSpec) -> Draft:
    """The spec cannot run: the job fails, and whatever it still runs is deleted."""
    if not draft.finished:
        message = "Invalid spec: " + "; ".join(error.errors)
        draft = (
            draft.completed(seen)
            .setting(seen, ConditionType.FAILED, True, "InvalidSpec", message)
            .reporting(WARNING, "InvalidSpec", message)
        )
    return clean_up(seen, draft, Clean.RUNNING, finished=True)


def name_taken(seen: Seen, draft: Draft, holder: JobRef) -> Draft:
    """`holder`, of the other API group, has the job's name: the job fails at once."""
    if draft.finished:
        return draft
    message = (
        f"The {holder.api.api_version} TFJob {seen.id}, created earlier, has the same "
        "name: pods and services are named after their TFJob, so only one of the two "
        "can run. Delete this one and create it under another name."
    )
    return (
        draft.completed(seen)
        .setting(seen, ConditionType.FAILED, True, NAME_TAKEN, message)
        .reporting(WARNING, NAME_TAKEN, message)
    )


def name_order(job: JobView) -> tuple[str, int, str]:
    """Sorts two TFJobs of one name (api.py: one per API group) so that the first holds it.

    The older holds the name, but creationTimestamp counts whole seconds: of two created in
    one second, the one this operator has already given a status (and maybe children) keeps
    it, and one already refused stays refused.
    """
    conditions = job.status.get("conditions") or ()
    refused = any(c.get("reason") == NAME_TAKEN for c in conditions)
    return (job.created, 2 if refused else 0 if conditions else 1, job.ref.uid)


def restart(
    seen: Seen,
    spec: JobSpec,
    draft: Draft,
    failures: Sequence[tuple[Replica, Failure]],
    in_place: int,
) -> tuple[Draft, frozenset[Replica]]:
    """Counts one restart for all `failures` and the replicas that restart with them; the
    job fails instead (no replica restarts) when backoffLimit forbids it."""
    group: set[Replica] = set()
    for replica, _ in failures:
        group |= restart_group(spec, replica)
    group = {r for r in group if not draft.succeeded_in(r)}
    backoff = spec.run_policy.backoff_limit
    cause = ", ".join(f"{replica.key} {failure.describe()}" for replica, failure in failures)
    if past_backoff_limit(backoff, draft.restart_count + 1, in_place):
        message = (
            f"{cause}; restarting again would pass backoffLimit {backoff} "
            f"({draft.restart_count} restarts so far)"
        )
        return fail(seen, spec, draft, "BackoffLimitExceeded", message), frozenset()
    count = draft.restart_count + 1
    generations = dict(draft.generations)
    for replica in group:
        generations[replica.key] = generations.get(replica.key, 0) + 1
    by_type = dict(draft.restarts_by_type)
    for replica_type in {r.type.value for r in group}:
        by_type[replica_type] = by_type.get(replica_type, 0) + 1
    names = ", ".join(r.key for r in sorted(group, key=_replica_order))
    limit = f" of backoffLimit {backoff}" if backoff is not None else ""
    draft, source = _resuming(seen, draft)
    message = f"{cause}; restarting {names}{source} (restart {count}{limit})"
    disrupted = all(failure.disrupted for _, failure in failures)
    restart_cause = RestartCause.DISRUPTED if disrupted else RestartCause.EXIT_CODE
    draft = dataclasses.replace(
        draft,
        restart_count=count,
        restarted=(*draft.restarted, restart_cause),
        generations=generations,
        restarts_by_type=by_type,
    )
    draft = draft.setting(seen, ConditionType.RESTARTING, True, "TFJobRestarting", message)
    return draft.reporting(WARNING, "TFJobRestarting", message), frozenset(group)


def checkpointed(seen: Seen, draft: Draft) -> Draft:
    """A replica reported the checkpoint it stopped at (stops.py), later than the one
    recorded and at another step (the replicas of one job stop at the same step, each a
    moment apart): recorded in the status, with an event."""
    stop = seen.stopped
    if stop is None:
        return draft
    recorded = draft.checkpoint or {}
    known = recorded.get("stoppedAt")
    if known and (recorded.get("step") == stop.step or not stop.later_than_time(str(known))):
        return draft
    message = (
        f"The replicas stopped with a checkpoint at {stop.describe()}; the job resumes from it"
    )
    draft = dataclasses.replace(draft, checkpoint=stop.status())
    return draft.reporting(NORMAL, "Checkpointed", message)


def _resuming(seen: Seen, draft: Draft) -> tuple[Draft, str]:
    """The replicas start again: from the checkpoint they stopped at, if they wrote one
    since the job last resumed (recorded as resumed now), and the words that say so."""
    stop = pending_stop(draft.checkpoint)
    if stop is None:
        return draft, ""
    checkpoint = {**(draft.checkpoint or {}), "resumedAt": seen.now_text}
    source = f" from the checkpoint at {stop.describe()}"
    return dataclasses.replace(draft, checkpoint=checkpoint), source


def suspend(seen: Seen, spec: JobSpec, draft: Draft) -> Draft:
    """Suspended by its spec, or the gate of an integration that holds the job (a
    queue's) is closed: that integration says why, in its words."""
    draft = delete_all(seen, draft, "the TFJob is suspended")
    message = next(
        (
            why
            for observation in seen.at(Stage.JOB)
            if (
                why := observation.integration.suspended_why(
                    seen.job,
                    spec,
                    observation.observed,
                    draft.gates.get(observation.integration.name),
                )
            )
            is not None
        ),
        f"TFJob {seen.id} is suspended.",
    )
    if not draft.is_true(ConditionType.SUSPENDED):
        draft = draft.reporting(NORMAL, "TFJobSuspended", f"{message} Deleting pods and services.")
    if (stop := pending_stop(draft.checkpoint)) is not None:
        message += f" Its replicas stopped with a checkpoint at {stop.describe()}."
    # The message follows Kueue's as it changes; its transition time stays.
    return draft.setting(seen, ConditionType.SUSPENDED, True, "TFJobSuspended", message)


def resume(seen: Seen, draft: Draft) -> Draft:
    """A suspended job runs again: its start time starts again."""
    if not draft.is_true(ConditionType.SUSPENDED):
        return draft
    draft, source = _resuming(seen, draft)
    draft = draft.setting(
        seen, ConditionType.SUSPENDED, False, "TFJobResumed", f"TFJob {seen.id} is resumed{source}."
    ).reporting(NORMAL, "TFJobResumed", f"Resumed{source}: creating the replicas again")
    return dataclasses.replace(draft, start_time=None)


def past_deadline(seen: Seen, spec: JobSpec, draft: Draft) -> Draft:
    """Fails the job once it has run for activeDeadlineSeconds; until then, looks again
    when it will have."""
    deadline = spec.run_policy.active_deadline_seconds
    if deadline is None or draft.start_time is None:
        return draft
    remaining = deadline - (seen.now - from_rfc3339(draft.start_time)).total_seconds()
    if remaining > 0:
        return draft.looking_again_within(remaining)
    message = f"TFJob {seen.id} has run longer than activeDeadlineSeconds ({deadline}s)"
    return fail(seen, spec, draft, "DeadlineExceeded", message)


def expire(seen: Seen, spec: JobSpec, draft: Draft) -> Draft:
    """A finished job is deleted ttlSecondsAfterFinished after it finished."""
    ttl = spec.run_policy.ttl_seconds_after_finished
    if ttl is None or draft.completion_time is None:
        return draft
    remaining = ttl - (seen.now - from_rfc3339(draft.completion_time)).total_seconds()
    if remaining <= 0:
        return dataclasses.replace(draft, delete_job=True)
    return draft.looking_again_within(remaining)


def refused(seen: Seen, desired: Mapping[str, Replica]) -> list[Refusal]:
    """Refusals of the replicas the spec has: those refused as invalid first, then in
    replica order."""
    order = list(desired)
    return sorted(
        (r for r in seen.refusals if r.replica in desired),
        key=lambda r: (not r.permanent, order.index(r.replica), r.kind),
    )


def refusal_since(seen: Seen, refusal: Refusal) -> datetime:
    """When `refusal` began: the first this operator saw, or earlier, the moment the
    status already reports for it (its condition's lastTransitionTime, written by this
    or another operator for this generation): a restart or a takeover does not start
    an invalid pod's grace again."""
    status = seen.job.status
    recorded = cond.find(status.get("conditions") or (), ConditionType.RUNNING)
    if (
        recorded is None
        or status.get("observedGeneration") != seen.job.generation
        or (recorded.get("status"), recorded.get("reason")) != ("False", refusal.condition_reason)
        or not str(recorded.get("message") or "").startswith(f"{refusal.replica}: ")
        or not recorded.get("lastTransitionTime")
    ):
        return refusal.since
    return min(refusal.since, from_rfc3339(str(recorded["lastTransitionTime"])))


def refusal_deadline(seen: Seen, refusal: Refusal) -> datetime:
    """When a child refused as invalid fails the job."""
    return refusal_since(seen, refusal) + seen.invalid_grace


def refused_for_good(seen: Seen, spec: JobSpec, draft: Draft, refusal: Refusal) -> Draft:
    """A child refused as invalid for the whole grace period fails the job: retrying the
    same spec cannot change the answer (refusals.py). Until then, looks again when it
    will have been."""
    if not refusal.permanent:
        return draft
    remaining = (refusal_deadline(seen, refusal) - seen.now).total_seconds()
    if remaining > 0:
        return draft.looking_again_within(remaining)
    seconds = seen.invalid_grace.total_seconds()
    message = (
        f"{refusal.describe()}; the TFJob renders it so, and it was still refused after "
        f"{seconds:.0f}s"
    )
    return fail(seen, spec, draft, refusal.condition_reason, message)


def _replica_order(replica: Replica) -> tuple[int, int]:
    return (REPLICA_ORDER.index(replica.type), replica.index)
