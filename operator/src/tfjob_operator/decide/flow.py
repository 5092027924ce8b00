"""The order of a decision: a finished job is cleaned up; an invalid one fails; a suspended
or queued one waits; a running one has its replicas reconciled (their outcomes first, then
failures and restarts, refusals, the gates, the children, the progress). Each step is a
function of outcomes.py, children.py or progress.py from a frozen Seen and Draft to the
next Draft."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..api import JobRef
from ..events import Event
from ..failure_policy import is_retryable, past_backoff_limit
from ..integrations.base import Gate, Integration, Observation, Stage
from ..job_view import JobView
from ..limits import INVALID_POD_GRACE_SECONDS
from ..observe import PodObservation, ServiceObservation
from ..plan import Plan, soonest
from ..refusals import Refusal
from ..spec import InvalidSpec, JobSpec
from ..stops import Stop
from ..success_policy import leader_succeeded
from ..tfconfig import JobConfigs, job_configs
from . import children, outcomes, progress
from .draft import Draft
from .seen import Seen


def decide(
    job: JobView,
    pods: Sequence[PodObservation],
    services: Sequence[ServiceObservation],
    now: datetime,
    cluster_domain: str | None = None,
    *,
    observations: Sequence[Observation] = (),
    refusals: Sequence[Refusal] = (),
    invalid_grace_seconds: float = INVALID_POD_GRACE_SECONDS,
    stopped: Stop | None = None,
) -> Plan:
    """`observations` are what each integration observed of the job (integrations/base.py),
    in the integrations' order. `refusals` are the API server's refusals of the job's
    children (refusals.py): one refused as invalid fails the job once it has lasted
    `invalid_grace_seconds`. `stopped` is the checkpoint a pod of the job, deleted since,
    reported as it stopped (stops.py)."""
    if job.deleting:
        return Plan()
    if job.managed_by is not None:
        return decide_dispatched(job, now, observations)
    seen = Seen.of(
        job,
        pods,
        services,
        now,
        cluster_domain,
        observations=observations,
        refusals=refusals,
        invalid_grace=timedelta(seconds=invalid_grace_seconds),
        stopped=stopped,
    )
    spec = job.parsed
    draft = progress.created(seen, Draft.of(job.status))
    if isinstance(spec, InvalidSpec):
        return progress.plan(seen, None, outcomes.invalid(seen, draft, spec))
    return progress.plan(seen, spec, _decide(seen, spec, draft))


def decide_dispatched(job: JobView, now: datetime, observations: Sequence[Observation]) -> Plan:
    """A job MultiKueue runs on a worker cluster (`job.managed_by`): as the Job controller
    leaves a Job whose managedBy names another controller, the operator creates no pod and
    no service for it and writes nothing of its status, which MultiKueue copies from the
    worker's copy. Its integrations still have their part (`dispatched`): the queue's
    Workload, which MultiKueue dispatches."""
    spec = job.parsed
    if isinstance(spec, InvalidSpec):
        return Plan()
    writes: list[tuple[Integration[Any, Any], Any]] = []
    events: list[Event] = []
    look_again: float | None = None
    for observation in observations:
        settled = observation.integration.dispatched(job, spec, observation.observed, now)
        if settled is None:
            continue
        writes.append((observation.integration, settled.writes))
        events += settled.events
        look_again = soonest(look_again, settled.requeue_after)
    return Plan(events=tuple(events), requeue_after=look_again, integration_writes=tuple(writes))


def decide_name_taken(job: JobView, holder: JobRef, now: datetime) -> Plan:
    """`job` has the namespace and name of `holder`, an older TFJob of the other API group.

    Children are named after their TFJob, so the two cannot both run: the younger fails at
    once, before it creates anything, rather than share pods and services with the other.
    """
    if job.deleting:
        return Plan()
    seen = Seen.of(job, (), (), now, None)
    draft = progress.created(seen, Draft.of(job.status))
    return progress.plan(seen, None, outcomes.name_taken(seen, draft, holder))


def _decide(seen: Seen, spec: JobSpec, draft: Draft) -> Draft:
    if draft.finished:
        draft = children.clean_up(seen, draft, spec.run_policy.clean_pod_policy, finished=True)
        return outcomes.expire(seen, spec, draft)
    draft = outcomes.checkpointed(seen, draft)
    configs = job_configs(seen.ref.name, seen.ref.namespace, spec, seen.cluster_domain)
    oversized = configs.oversized()
    if oversized is not None:
        return outcomes.invalid(seen, draft, InvalidSpec([oversized]))
    for observation in seen.observations:
        error = observation.integration.check(seen.job, spec, observation.observed)
        if error is not None:
            return outcomes.invalid(seen, draft, error)
    if spec.run_policy.suspend:
        return outcomes.suspend(seen, spec, draft)
    for observation in seen.at(Stage.JOB):
        draft, queue = _ask_gate(seen, spec, draft, observation)
        if queue is not None and not queue.open:
            return outcomes.suspend(seen, spec, draft)
    draft = outcomes.resume(seen, draft)
    if draft.start_time is None:
        draft = dataclasses.replace(draft, start_time=seen.now_text)
    draft = outcomes.past_deadline(seen, spec, draft)
    if draft.finished:
        return draft
    return _reconcile_replicas(seen, spec, configs, draft)


def _reconcile_replicas(seen: Seen, spec: JobSpec, configs: JobConfigs, draft: Draft) -> Draft:
    desired = {r.key: r for r in spec.replicas()}
    pods = children.sort_pods(seen, draft, desired, configs.digests)
    draft, current, stale = pods.draft, dict(pods.current), list(pods.stale)

    for key, pod in current.items():
        if pod.succeeded:
            draft = draft.succeeding(desired[key])
    if leader_succeeded(spec, draft.succeeded):
        return outcomes.training_finished(seen, spec, draft, current)

    failures = [
        (desired[key], pod.failure)
        for key, pod in current.items()
        if pod.failure is not None and not pod.succeeded
    ]
    permanent = [
        (r, f)
        for r, f in failures
        if not is_retryable(spec.replica_specs[r.type].restart_policy, f)
    ]
    if permanent:
        replica, failure = permanent[0]
        policy = spec.replica_specs[replica.type].restart_policy
        message = (
            f"{replica.key} {failure.describe()}; not retryable under restartPolicy {policy.value}"
        )
        return outcomes.fail(seen, spec, draft, "ReplicaFailed", message)
    in_place = sum(p.container_restarts for p in current.values())
    backoff = spec.run_policy.backoff_limit
    if failures:
        draft, restarting = outcomes.restart(seen, spec, draft, failures, in_place)
        if draft.finished:
            return draft
        for replica in restarting:
            if replica.key in current:
                pod = current.pop(replica.key)
                stale.append(pod)
                draft = draft.deleting_pod(seen, pod, "the replica is restarting")
    elif past_backoff_limit(backoff, draft.restart_count, in_place):
        message = (
            f"Containers restarted {in_place} times in place and the job "
            f"{draft.restart_count} times, past backoffLimit {backoff}"
        )
        return outcomes.fail(seen, spec, draft, "BackoffLimitExceeded", message)

    refused = outcomes.refused(seen, desired)
    if refused:
        draft = outcomes.refused_for_good(seen, spec, draft, refused[0])
        if draft.finished:
            return draft
    pods_wait = False
    for observation in seen.at(Stage.PODS):
        draft, gate = _ask_gate(seen, spec, draft, observation)
        pods_wait = pods_wait or (gate is not None and not gate.open)
    draft = children.create_missing(
        seen, spec, configs, draft, desired, current, stale, pods_wait=pods_wait
    )
    return progress.report_progress(seen, draft, desired, current, stale, refused)


def _ask_gate(
    seen: Seen, spec: JobSpec, draft: Draft, observation: Observation
) -> tuple[Draft, Gate[Any] | None]:
    """The integration's gate for the job, if it holds it, kept in the draft."""
    gate = observation.integration.gate(
        seen.job, spec, observation.observed, pods_exist=bool(seen.pods), now=seen.now_text
    )
    if gate is None:
        return draft, None
    return draft.asked(observation.integration.name, gate), gate
