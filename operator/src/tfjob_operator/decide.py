"""The controller's decisions for one TFJob, as a pure function of what it observes.

`decide` takes the TFJob (spec and the status the operator persisted), the job's pods and
services from the watch cache, what each integration observed of it (integrations/), and
the time; it returns a frozen Plan: the new status, the children to create and delete, the
events to record, each integration's writes, and when to look again. Nothing here talks to
the API, so every transition is unit-tested without a cluster.

Restart safety rests on three rules:
- Children have fixed names, so a second create of the same replica fails on the server.
- Each replica has a generation in the status; a restart increments it before any pod is
  deleted, and a pod labelled with an older generation is stale. A restart therefore counts
  once, however many times the operator is killed while carrying it out.
- Decisions that end the job or restart replicas are written to the status (with the
  resourceVersion they were based on) before the pods are touched.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import conditions as cond
from . import status as status_of
from .api import CleanPodPolicy as Clean
from .api import ConditionType, JobRef, ReplicaType
from .events import NORMAL, WARNING, Event
from .failure_policy import is_retryable, past_backoff_limit, restart_group
from .integrations.base import Gate, Integration, Observation, Outcome, Stage
from .job_view import JobView
from .limits import INVALID_POD_GRACE_SECONDS
from .observe import Failure, PodObservation, ServiceObservation
from .refusals import Refusal
from .render import render_pod, render_service
from .spec import REPLICA_ORDER, InvalidSpec, JobSpec, Replica
from .success_policy import leader_succeeded
from .tfconfig import JobConfigs, job_configs
from .timeutil import from_rfc3339, to_rfc3339

#: The reason a TFJob fails with when a TFJob of the other API group holds its name.
NAME_TAKEN = "NameTaken"
#: Running=False once nothing keeps the job's pods from running any more (an image found,
#: a refused pod accepted), until they all run.
REPLICAS_STARTING = "ReplicasStarting"


@dataclass(frozen=True)
class Deletion:
    name: str
    uid: str
    why: str
    #: May be deleted together with the job's other collectable children of its kind, by
    #: one request that selects on the job's uid label (a finished job's clean-up).
    collectable: bool = False


@dataclass(frozen=True)
class Creation:
    """A child to create: its name, and how to build its body.

    The body is built when the batch that sends it goes out (children.py), not when the
    plan is made: a pod's TF_CONFIG names every replica of its job, so a job of a thousand
    replicas would otherwise hold a thousand such pods in memory at once.
    """

    name: str
    render: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class Plan:
    """What one decision does; the controller applies it as it is."""

    status: dict[str, Any] | None = None
    create_pods: list[Creation] = field(default_factory=list)
    delete_pods: list[Deletion] = field(default_factory=list)
    create_services: list[Creation] = field(default_factory=list)
    delete_services: list[Deletion] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: Seconds until a deadline or TTL expires, when no watch event may arrive first.
    requeue_after: float | None = None
    #: ttlSecondsAfterFinished has passed: delete the TFJob.
    delete_job: bool = False
    #: Each integration's writes (integrations/base.py: `settle`), in the integrations'
    #: order; one that has nothing to write is absent.
    integration_writes: tuple[tuple[Integration[Any, Any], Any], ...] = ()
    #: Restarts of the job this decision counted (written to the status first).
    restarts: int = 0
    #: How soon the new status is written: a decision before any child is touched, ahead of
    #: other jobs' writes; progress a moment later (status.py).
    status_write: status_of.StatusWrite = status_of.StatusWrite.PROGRESS

    def writes_of(self, name: str) -> Any | None:
        """The writes of the integration called `name`, if it has any."""
        return next((w for i, w in self.integration_writes if i.name == name), None)

    def looking_again_within(self, seconds: float | None) -> Plan:
        """The plan, deciding again at most `seconds` from now (None: no new reason)."""
        return dataclasses.replace(self, requeue_after=soonest(self.requeue_after, seconds))


def soonest(current: float | None, seconds: float | None) -> float | None:
    """The sooner of two times to look again; None is no reason to."""
    if seconds is None:
        return current
    return seconds if current is None else min(current, seconds)


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
) -> Plan:
    """`observations` are what each integration observed of the job (integrations/base.py),
    in the integrations' order. `refusals` are the API server's refusals of the job's
    children (refusals.py): one refused as invalid fails the job once it has lasted
    `invalid_grace_seconds`."""
    if job.deleting:
        return Plan()
    return _Decision(
        job,
        pods,
        services,
        now,
        cluster_domain,
        observations=observations,
        refusals=refusals,
        invalid_grace=timedelta(seconds=invalid_grace_seconds),
    ).run()


def name_order(job: JobView) -> tuple[str, int, str]:
    """Sorts two TFJobs of one name (api.py: one per API group) so that the first holds it.

    The older holds the name, but creationTimestamp counts whole seconds: of two created in
    one second, the one this operator has already given a status (and maybe children) keeps
    it, and one already refused stays refused.
    """
    conditions = job.status.get("conditions") or ()
    refused = any(c.get("reason") == NAME_TAKEN for c in conditions)
    return (job.created, 2 if refused else 0 if conditions else 1, job.ref.uid)


def decide_name_taken(job: JobView, holder: JobRef, now: datetime) -> Plan:
    """`job` has the namespace and name of `holder`, an older TFJob of the other API group.

    Children are named after their TFJob, so the two cannot both run: the younger fails at
    once, before it creates anything, rather than share pods and services with the other.
    """
    if job.deleting:
        return Plan()
    return _Decision(job, (), (), now, None).name_taken(holder)


class _Decision:
    def __init__(
        self,
        job: JobView,
        pods: Sequence[PodObservation],
        services: Sequence[ServiceObservation],
        now: datetime,
        cluster_domain: str | None,
        *,
        observations: Sequence[Observation] = (),
        refusals: Sequence[Refusal] = (),
        invalid_grace: timedelta = timedelta(seconds=INVALID_POD_GRACE_SECONDS),
    ) -> None:
        self.job = job
        self.ref = job.ref
        self.now = now
        self.now_text = to_rfc3339(now)
        self.cluster_domain = cluster_domain
        self.pods = [p for p in pods if p.owner_uid == job.ref.uid]
        self.services = [s for s in services if s.owner_uid == job.ref.uid]
        # Names still held by children of an earlier TFJob of the same name.
        self.occupied_pod_names = {p.name for p in pods}
        self.occupied_service_names = {s.name for s in services}
        old = job.status
        self.old_status = old
        self.conditions: list[dict[str, Any]] = [dict(c) for c in old.get("conditions") or []]
        self.restart_count = int(old.get("restartCount") or 0)
        self.generations: dict[str, int] = dict(old.get("replicaGenerations") or {})
        replica_statuses = old.get("replicaStatuses") or {}
        self.succeeded: dict[str, set[int]] = {
            t: set(s.get("succeededIndexes") or []) for t, s in replica_statuses.items()
        }
        self.restarts_by_type: dict[str, int] = {
            t: int(s.get("restarts") or 0) for t, s in replica_statuses.items()
        }
        self.start_time: str | None = old.get("startTime")
        self.completion_time: str | None = old.get("completionTime")
        #: The plan's lists fill as the decision goes; the rest is set once it is done.
        self.plan = Plan()
        self.requeue_after: float | None = None
        self.restarts = 0
        self.delete_job = False
        self.integration_writes: list[tuple[Integration[Any, Any], Any]] = []
        self.observations = list(observations)
        #: The integrations' gates asked in this decision, by integration name.
        self.gates: dict[str, Gate[Any]] = {}
        #: The gates the pods passed (integrations/base.py); each adds what it must to a pod.
        self.passed: list[Gate[Any]] = []
        #: Replicas whose pods this decision creates.
        self.creating: list[Replica] = []
        #: The API server's refusals of children rendered from this spec (refusals.py).
        self.refusals = [r for r in refusals if r.generation == job.generation]
        self.invalid_grace = invalid_grace

    # -- flow ---------------------------------------------------------------------------------

    def run(self) -> Plan:
        self._created()
        spec = self.job.parsed
        if isinstance(spec, InvalidSpec):
            return self._invalid(spec)
        if cond.is_finished(self.conditions):
            self._clean_up(spec.run_policy.clean_pod_policy, finished=True)
            self._expire(spec)
            return self._plan_with_status(spec)
        configs = job_configs(self.ref.name, self.ref.namespace, spec, self.cluster_domain)
        oversized = configs.oversized()
        if oversized is not None:
            return self._invalid(InvalidSpec([oversized]))
        for seen in self.observations:
            error = seen.integration.check(self.job, spec, seen.observed)
            if error is not None:
                return self._invalid(error)
        if spec.run_policy.suspend:
            return self._suspend(spec)
        for seen in self._at(Stage.JOB):
            queue = self._gate(spec, seen)
            if queue is not None and not queue.open:
                return self._suspend(spec)
        if cond.is_true(self.conditions, ConditionType.SUSPENDED):
            self._set(
                ConditionType.SUSPENDED, False, "TFJobResumed", f"TFJob {self._id} is resumed."
            )
            self._event(NORMAL, "TFJobResumed", "Resumed: creating the replicas again")
            self.start_time = None
        if self.start_time is None:
            self.start_time = self.now_text
        if self._fail_if_past_deadline(spec):
            return self._plan_with_status(spec)
        return self._reconcile_replicas(spec, configs)

    def _reconcile_replicas(self, spec: JobSpec, configs: JobConfigs) -> Plan:
        desired = {r.key: r for r in spec.replicas()}
        digests = configs.digests
        current: dict[str, PodObservation] = {}
        stale: list[PodObservation] = []
        for pod in self.pods:
            key = pod.replica.key if pod.replica else None
            if key is None or key not in desired:
                self._delete_pod(pod, "the replica is no longer in the spec")
                self._delete_service_of(pod.name, "the replica is no longer in the spec")
            elif pod.generation < self.generations.get(key, 0):
                stale.append(pod)
                self._delete_pod(pod, "the replica is restarting")
            elif pod.cluster_digest != digests[key]:
                stale.append(pod)
                self._delete_pod(pod, "the cluster changed: TF_CONFIG must be rendered again")
            else:
                current[key] = pod
        if any(p.cluster_digest != digests.get(p.replica.key if p.replica else "") for p in stale):
            message = "The replica counts changed: recreating the replicas with a new TF_CONFIG"
            previous = cond.find(self.conditions, ConditionType.RESTARTING)
            if not previous or (previous.get("status"), previous.get("reason")) != (
                "True",
                "ReplicasChanged",
            ):
                self._event(NORMAL, "ReplicasChanged", message)
            self._set(ConditionType.RESTARTING, True, "ReplicasChanged", message)

        for key, pod in current.items():
            if pod.succeeded:
                self.succeeded.setdefault(desired[key].type.value, set()).add(desired[key].index)

        if leader_succeeded(spec, self.succeeded):
            return self._training_finished(spec, current)

        failures = [
            (desired[key], pod, pod.failure)
            for key, pod in current.items()
            if pod.failure is not None and not pod.succeeded
        ]
        permanent = [
            (r, f)
            for r, _, f in failures
            if not is_retryable(spec.replica_specs[r.type].restart_policy, f)
        ]
        if permanent:
            replica, failure = permanent[0]
            policy = spec.replica_specs[replica.type].restart_policy
            self._fail(
                spec,
                "ReplicaFailed",
                f"{replica.key} {failure.describe()}; not retryable under restartPolicy "
                f"{policy.value}",
            )
            return self._plan_with_status(spec)
        in_place = sum(p.container_restarts for p in current.values())
        backoff = spec.run_policy.backoff_limit
        if failures:
            restarting = self._restart(spec, [(r, f) for r, _, f in failures], in_place)
            if restarting is None:
                return self._plan_with_status(spec)
            for replica in restarting:
                if replica.key in current:
                    pod = current.pop(replica.key)
                    stale.append(pod)
                    self._delete_pod(pod, "the replica is restarting")
        elif past_backoff_limit(backoff, self.restart_count, in_place):
            self._fail(
                spec,
                "BackoffLimitExceeded",
                f"Containers restarted {in_place} times in place and the job "
                f"{self.restart_count} times, past backoffLimit {backoff}",
            )
            return self._plan_with_status(spec)

        refused = self._refused(desired)
        if refused and self._fail_if_refused_for_good(spec, refused[0]):
            return self._plan_with_status(spec)
        closed = [
            gate
            for seen in self._at(Stage.PODS)
            if (gate := self._gate(spec, seen)) is not None and not gate.open
        ]
        self._create_missing(spec, configs, desired, current, stale, pods_wait=bool(closed))
        self._report_progress(spec, desired, current, stale, refused)
        return self._plan_with_status(spec)

    # -- outcomes -----------------------------------------------------------------------------

    def _training_finished(self, spec: JobSpec, current: Mapping[str, PodObservation]) -> Plan:
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
        waiting_for_evaluator = evaluator is not None and evaluator.running
        self._clean_up(
            spec.run_policy.clean_pod_policy,
            finished=not waiting_for_evaluator,
            keep={evaluator.name} if waiting_for_evaluator and evaluator else set(),
        )
        if waiting_for_evaluator:
            self._set(
                ConditionType.RUNNING,
                True,
                "TrainingFinished",
                f"{leader.key} succeeded; waiting for the evaluator to evaluate the final "
                "checkpoint",
            )
            return self._plan_with_status(spec)
        self.completion_time = self.completion_time or self.now_text
        self._set(
            ConditionType.SUCCEEDED,
            True,
            "TFJobSucceeded",
            f"TFJob {self._id} successfully completed.",
        )
        self._event(NORMAL, "TFJobSucceeded", f"{leader.key} succeeded: the TFJob is complete")
        self._expire(spec)
        return self._plan_with_status(spec)

    def _refused(self, desired: Mapping[str, Replica]) -> list[Refusal]:
        """Refusals of the replicas the spec has: those refused as invalid first, then in
        replica order."""
        order = list(desired)
        return sorted(
            (r for r in self.refusals if r.replica in desired),
            key=lambda r: (not r.permanent, order.index(r.replica), r.kind),
        )

    def _refusal_deadline(self, refusal: Refusal) -> datetime:
        return self._refusal_since(refusal) + self.invalid_grace

    def _refusal_since(self, refusal: Refusal) -> datetime:
        """When `refusal` began: the first this operator saw, or earlier, the moment the
        status already reports for it (its condition's lastTransitionTime, written by this
        or another operator for this generation): a restart or a takeover does not start
        an invalid pod's grace again."""
        recorded = cond.find(self.old_status.get("conditions") or [], ConditionType.RUNNING)
        if (
            recorded is None
            or self.old_status.get("observedGeneration") != self.job.generation
            or (recorded.get("status"), recorded.get("reason"))
            != ("False", refusal.condition_reason)
            or not str(recorded.get("message") or "").startswith(f"{refusal.replica}: ")
            or not recorded.get("lastTransitionTime")
        ):
            return refusal.since
        return min(refusal.since, from_rfc3339(str(recorded["lastTransitionTime"])))

    def _fail_if_refused_for_good(self, spec: JobSpec, refusal: Refusal) -> bool:
        """A child refused as invalid for the whole grace period fails the job: retrying the
        same spec cannot change the answer (refusals.py)."""
        if not refusal.permanent:
            return False
        remaining = (self._refusal_deadline(refusal) - self.now).total_seconds()
        if remaining > 0:
            self._look_again_within(remaining)
            return False
        seconds = self.invalid_grace.total_seconds()
        self._fail(
            spec,
            refusal.condition_reason,
            f"{refusal.describe()}; the TFJob renders it so, and it was still refused after "
            f"{seconds:.0f}s",
        )
        return True

    def _fail(self, spec: JobSpec, reason: str, message: str) -> None:
        self.completion_time = self.completion_time or self.now_text
        self._set(ConditionType.FAILED, True, reason, message)
        self._event(WARNING, reason, message)
        self._clean_up(spec.run_policy.clean_pod_policy, finished=True)
        self._expire(spec)

    def name_taken(self, holder: JobRef) -> Plan:
        self._created()
        if not cond.is_finished(self.conditions):
            message = (
                f"The {holder.api.api_version} TFJob {self._id}, created earlier, has the same "
                "name: pods and services are named after their TFJob, so only one of the two "
                "can run. Delete this one and create it under another name."
            )
            self.completion_time = self.now_text
            self._set(ConditionType.FAILED, True, NAME_TAKEN, message)
            self._event(WARNING, NAME_TAKEN, message)
        return self._plan_with_status(None)

    def _invalid(self, error: InvalidSpec) -> Plan:
        if not cond.is_finished(self.conditions):
            message = "Invalid spec: " + "; ".join(error.errors)
            self.completion_time = self.now_text
            self._set(ConditionType.FAILED, True, "InvalidSpec", message)
            self._event(WARNING, "InvalidSpec", message)
        self._clean_up(Clean.RUNNING, finished=True)
        return self._plan_with_status(None)

    def _restart(
        self,
        spec: JobSpec,
        failures: Sequence[tuple[Replica, Failure]],
        in_place: int,
    ) -> set[Replica] | None:
        """Counts one restart for all `failures`; None when backoffLimit forbids it."""
        group: set[Replica] = set()
        for replica, _ in failures:
            group |= restart_group(spec, replica)
        group = {r for r in group if r.index not in self.succeeded.get(r.type.value, set())}
        backoff = spec.run_policy.backoff_limit
        cause = ", ".join(f"{replica.key} {failure.describe()}" for replica, failure in failures)
        if past_backoff_limit(backoff, self.restart_count + 1, in_place):
            self._fail(
                spec,
                "BackoffLimitExceeded",
                f"{cause}; restarting again would pass backoffLimit {backoff} "
                f"({self.restart_count} restarts so far)",
            )
            return None
        self.restart_count += 1
        self.restarts += 1
        for replica in group:
            self.generations[replica.key] = self.generations.get(replica.key, 0) + 1
        for replica_type in {r.type.value for r in group}:
            self.restarts_by_type[replica_type] = self.restarts_by_type.get(replica_type, 0) + 1
        names = ", ".join(r.key for r in _ordered(group))
        limit = f" of backoffLimit {backoff}" if backoff is not None else ""
        message = f"{cause}; restarting {names} (restart {self.restart_count}{limit})"
        self._set(ConditionType.RESTARTING, True, "TFJobRestarting", message)
        self._event(WARNING, "TFJobRestarting", message)
        return group

    def _suspend(self, spec: JobSpec) -> Plan:
        """Suspended by its spec, or the gate of an integration that holds the job (a
        queue's) is closed: that integration says why, in its words."""
        for pod in self.pods:
            self._delete_pod(pod, "the TFJob is suspended")
        for service in self.services:
            self._delete_service(service, "the TFJob is suspended")
        message = next(
            (
                why
                for seen in self._at(Stage.JOB)
                if (
                    why := seen.integration.suspended_why(
                        self.job, spec, seen.observed, self.gates.get(seen.integration.name)
                    )
                )
                is not None
            ),
            f"TFJob {self._id} is suspended.",
        )
        if not cond.is_true(self.conditions, ConditionType.SUSPENDED):
            self._event(NORMAL, "TFJobSuspended", "Suspended: deleting pods and services")
        # The message follows Kueue's as it changes; its transition time stays.
        self._set(ConditionType.SUSPENDED, True, "TFJobSuspended", message)
        return self._plan_with_status(spec)

    # -- integrations (integrations/) ------------------------------------------------------

    def _at(self, stage: Stage) -> list[Observation]:
        return [seen for seen in self.observations if seen.integration.stage is stage]

    def _gate(self, spec: JobSpec, seen: Observation) -> Gate[Any] | None:
        """The integration's gate for the job, if it holds it; an open one dresses the pods
        this decision creates."""
        gate = seen.integration.gate(
            self.job, spec, seen.observed, pods_exist=bool(self.pods), now=self.now_text
        )
        if gate is not None:
            self.gates[seen.integration.name] = gate
            if gate.open:
                self.passed.append(gate)
        return gate

    def _status_fields(self) -> set[str]:
        """The fields of the status the integrations own."""
        return {
            field_name
            for seen in self.observations
            if (field_name := seen.integration.status_field) is not None
        }

    def _settle(self, spec: JobSpec | None, status: dict[str, Any]) -> list[Event]:
        """Each integration's part, once the job's status is decided: its writes, its field
        of `status`, and its events (returned: they are not the job's transitions)."""
        finished = cond.is_finished(self.conditions)
        succeeded = cond.is_true(self.conditions, ConditionType.SUCCEEDED)
        ending = cond.find(
            self.conditions, ConditionType.SUCCEEDED if succeeded else ConditionType.FAILED
        )
        outcome = Outcome(
            status=status,
            finished=finished,
            succeeded=succeeded,
            suspended=cond.is_true(self.conditions, ConditionType.SUSPENDED),
            suspended_by_spec=not finished and spec is not None and spec.run_policy.suspend,
            message=str((ending or {}).get("message") or "") if finished else "",
            now=self.now,
        )
        events: list[Event] = []
        for seen in self.observations:
            integration = seen.integration
            settled = integration.settle(
                self.job, spec, seen.observed, outcome, self.gates.get(integration.name)
            )
            field_name = integration.status_field
            if field_name is not None and field_name in self.old_status:
                status[field_name] = self.old_status[field_name]
            if settled is None:
                continue
            self.integration_writes.append((integration, settled.writes))
            if field_name is not None:
                status.pop(field_name, None)
                if settled.status is not None:
                    status[field_name] = dict(settled.status)
            events += settled.events
            self._look_again_within(settled.requeue_after)
        return events

    def _fail_if_past_deadline(self, spec: JobSpec) -> bool:
        deadline = spec.run_policy.active_deadline_seconds
        if deadline is None or self.start_time is None:
            return False
        remaining = deadline - (self.now - from_rfc3339(self.start_time)).total_seconds()
        if remaining > 0:
            self._look_again_within(remaining)
            return False
        self._fail(
            spec,
            "DeadlineExceeded",
            f"TFJob {self._id} has run longer than activeDeadlineSeconds ({deadline}s)",
        )
        return True

    def _expire(self, spec: JobSpec) -> None:
        ttl = spec.run_policy.ttl_seconds_after_finished
        if ttl is None or self.completion_time is None:
            return
        remaining = ttl - (self.now - from_rfc3339(self.completion_time)).total_seconds()
        if remaining <= 0:
            self.delete_job = True
        else:
            self._look_again_within(remaining)

    # -- children -----------------------------------------------------------------------------

    def _create_missing(
        self,
        spec: JobSpec,
        configs: JobConfigs,
        desired: Mapping[str, Replica],
        current: Mapping[str, PodObservation],
        stale: Sequence[PodObservation],
        *,
        pods_wait: bool,
    ) -> None:
        """Creates absent pods and services; a restarting group waits for its old pods, and
        every pod for a gate when `pods_wait`; the gates passed dress the pods."""
        training_blocked = any(
            p.replica is not None and p.replica.type is not ReplicaType.EVALUATOR for p in stale
        )
        gates = tuple(self.passed)
        for key, replica in desired.items():
            name = replica.name(self.ref.name)
            if name not in self.occupied_service_names:
                render = functools.partial(render_service, self.ref, spec, replica)
                self.plan.create_services.append(Creation(name, render))
            if pods_wait or replica.index in self.succeeded.get(replica.type.value, set()):
                continue
            if key in current or name in self.occupied_pod_names:
                continue
            if training_blocked and replica.type is not ReplicaType.EVALUATOR:
                continue
            self.creating.append(replica)
            render = functools.partial(
                _dressed_pod,
                self.ref,
                spec,
                replica,
                self.generations.get(key, 0),
                self.cluster_domain,
                configs,
                gates,
            )
            self.plan.create_pods.append(Creation(name, render))

    def _clean_up(self, policy: Clean, finished: bool, keep: set[str] | None = None) -> None:
        """Applies cleanPodPolicy; services go with their pods (all of them under All).

        Once the job is finished, its children may go in one request per kind (see
        `Deletion.collectable`): nothing of a finished job is left to run.
        """
        if policy is Clean.NONE:
            return
        keep = keep or set()
        why = f"cleanPodPolicy {policy.value}"
        for pod in self.pods:
            if pod.name in keep or pod.terminating:
                continue
            if policy is Clean.ALL or pod.active:
                self._delete_pod(pod, why, collectable=finished)
                self._delete_service_of(pod.name, why, collectable=finished)
        if policy is Clean.ALL and finished:
            for service in self.services:
                self._delete_service(service, why, collectable=True)

    def _delete_pod(self, pod: PodObservation, why: str, collectable: bool = False) -> None:
        if not pod.terminating and all(d.uid != pod.uid for d in self.plan.delete_pods):
            collectable = collectable and pod.labelled_uid == self.ref.uid
            self.plan.delete_pods.append(Deletion(pod.name, pod.uid, why, collectable))

    def _delete_service(
        self, service: ServiceObservation, why: str, collectable: bool = False
    ) -> None:
        if all(d.uid != service.uid for d in self.plan.delete_services):
            collectable = collectable and service.labelled_uid == self.ref.uid
            self.plan.delete_services.append(Deletion(service.name, service.uid, why, collectable))

    def _delete_service_of(self, pod_name: str, why: str, collectable: bool = False) -> None:
        for service in self.services:
            if service.name == pod_name:
                self._delete_service(service, why, collectable)

    # -- status -------------------------------------------------------------------------------

    def _report_progress(
        self,
        spec: JobSpec,
        desired: Mapping[str, Replica],
        current: Mapping[str, PodObservation],
        stale: Sequence[PodObservation],
        refused: Sequence[Refusal],
    ) -> None:
        """`refused` are the replicas' refusals, in the order `_refused` gives them."""
        training = [
            key
            for key, r in desired.items()
            if r.type is not ReplicaType.EVALUATOR
            and r.index not in self.succeeded.get(r.type.value, set())
        ]
        if refused:
            first = refused[0]
            message = first.describe()
            if first.permanent:
                message += (
                    f"; the TFJob fails at {to_rfc3339(self._refusal_deadline(first))} "
                    "unless its spec is changed"
                )
            others = sorted({r.replica for r in refused[1:]} - {first.replica})
            if others:
                message += f" (also refused: {', '.join(others)})"
            # No event here: the controller records each refusal as it happens.
            self._set(
                ConditionType.RUNNING,
                False,
                first.condition_reason,
                message,
                since=to_rfc3339(self._refusal_since(first)),
            )
            return
        all_running = all(key in current and current[key].running for key in training)
        if all_running and not stale:
            self._set(ConditionType.RUNNING, True, "TFJobRunning", f"TFJob {self._id} is running.")
            return
        if cond.is_true(self.conditions, ConditionType.RESTARTING):
            return
        waiting = [
            (key, current[key])
            for key in sorted(current)
            if current[key].waiting_reason is not None and current[key].active
        ]
        said: tuple[str, str] | None = None
        if waiting:
            key, pod = waiting[0]
            reason = pod.waiting_reason or "Pending"
            message = f"{key} is {'pending' if pod.phase == 'Pending' else 'waiting'}: {reason}"
            if pod.waiting_message:
                message += f": {pod.waiting_message}"
            said, series = (reason, message), key
        for seen in self._at(Stage.PODS):
            own = seen.integration.pods_wait_why(self.job, seen.observed, said)
            if own is not None:
                said, series = own, seen.integration.name
                break
        if said is None:
            self._starting()
            return
        reason, message = said
        # An event on the transition only: the message follows whichever pod the scheduler
        # reported on last, and must not repeat the event each time. The kubelet's reasons
        # alternate (ErrImagePull, ImagePullBackOff): each one's events of a replica are one
        # Event with a count (the series).
        before = cond.find(self.conditions, ConditionType.RUNNING)
        if before is None or (before.get("status"), before.get("reason")) != ("False", reason):
            self._event(WARNING, reason, message, series=series)
        self._set(ConditionType.RUNNING, False, reason, message)

    def _starting(self) -> None:
        """Nothing keeps the pods from running: a Running=False that said why is stale."""
        before = cond.find(self.conditions, ConditionType.RUNNING)
        if before is None or before.get("status") != "False":
            return
        self._set(
            ConditionType.RUNNING,
            False,
            REPLICAS_STARTING,
            f"TFJob {self._id}: its pods are created and starting.",
        )

    def _plan_with_status(self, spec: JobSpec | None) -> Plan:
        """Builds the status, with each integration's part; it goes into the plan only if
        something in it changed."""
        replicas = status_of.replica_statuses(
            self.ref,
            list(spec.replica_specs) if spec else [],
            self.pods,
            self.succeeded,
            self.restarts_by_type,
            creating=self.creating,
            deleting={d.uid for d in self.plan.delete_pods},
        )
        status: dict[str, Any] = {
            "conditions": self.conditions,
            "state": cond.state(self.conditions),
            "replicaStatuses": replicas,
            **status_of.totals(replicas),
            "restartCount": self.restart_count,
            "replicaGenerations": self.generations,
            "observedGeneration": self.job.generation,
        }
        if self.start_time:
            status["startTime"] = self.start_time
        if self.completion_time:
            status["completionTime"] = self.completion_time
        previous = {k: v for k, v in self.old_status.items() if k != "lastReconcileTime"}
        new_status: dict[str, Any] | None = None
        write = status_of.StatusWrite.PROGRESS
        own = {k: v for k, v in previous.items() if k not in self._status_fields()}
        reconciled = status != own
        beside = self._settle(spec, status)
        if status != previous:
            # The job's own fields changed: a reconcile to record. An integration's field
            # alone goes in a patch of its own.
            last = self.now_text if reconciled else self.old_status.get("lastReconcileTime")
            if last is not None:
                status["lastReconcileTime"] = last
            new_status = status
            # An event reports a transition the status records: written with it, or the
            # next decision, reading the old status, would report it again.
            write = (
                status_of.StatusWrite.DECISION
                if self.plan.events
                else status_of.status_write(previous, status)
            )
            if beside and write is status_of.StatusWrite.PROGRESS:
                write = status_of.StatusWrite.TRANSITION
        self.plan.events.extend(beside)
        return dataclasses.replace(
            self.plan,
            status=new_status,
            requeue_after=self.requeue_after,
            delete_job=self.delete_job,
            integration_writes=tuple(self.integration_writes),
            restarts=self.restarts,
            status_write=write,
        )

    # -- helpers ------------------------------------------------------------------------------

    @property
    def _id(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"

    def _created(self) -> None:
        if cond.find(self.conditions, ConditionType.CREATED) is None:
            self._set(ConditionType.CREATED, True, "TFJobCreated", f"TFJob {self._id} is created.")

    def _set(
        self,
        kind: ConditionType,
        status: bool,
        reason: str,
        message: str,
        since: str | None = None,
    ) -> None:
        self.conditions = cond.set_condition(
            self.conditions, kind, status, reason, message, self.now_text, since
        )

    def _look_again_within(self, seconds: float | None) -> None:
        """Decide again at most `seconds` from now: the soonest of every reason to."""
        self.requeue_after = soonest(self.requeue_after, seconds)

    def _event(self, kind: str, reason: str, message: str, series: str = "") -> None:
        self.plan.events.append(Event(kind, reason, message, series))


def _dressed_pod(
    job: JobRef,
    spec: JobSpec,
    replica: Replica,
    generation: int,
    cluster_domain: str | None,
    configs: JobConfigs,
    gates: Sequence[Gate[Any]],
) -> dict[str, Any]:
    """The replica's pod with what each gate it passed adds to it."""
    pod = render_pod(job, spec, replica, generation, cluster_domain, configs)
    for gate in gates:
        gate.dress(pod, replica)
    return pod


def _ordered(replicas: set[Replica]) -> list[Replica]:
    return sorted(replicas, key=lambda r: (REPLICA_ORDER.index(r.type), r.index))
