"""A PodDisruptionBudget that keeps a node drain from evicting a training pod mid-run.

A drain (`kubectl drain`, a node upgrade, the cluster autoscaler taking a node away) evicts
pods through the Eviction API, which honours PodDisruptionBudgets. The workers of a
synchronous job (MultiWorkerMirroredStrategy) train in lock step: one evicted worker fails
the step for all of them, and the whole job restarts from its last checkpoint. A job that
asks for it with the annotation `tfjob.dev/disruption-budget: "true"` gets a budget of no
voluntary disruption for its training pods (every replica but the evaluator) while it runs:
the drain waits until the job has finished, or the job is suspended, and then proceeds.

The budget asks for all the training pods (`minAvailable`, a count: the disruption
controller reads a `maxUnavailable` or a percentage from the pods' owner's scale, which a
TFJob does not serve), and follows their number as the replicas change. It allows evicting
a pod that is not ready (`unhealthyPodEvictionPolicy: AlwaysAllow`): a pod that never
started protects nothing, and must not hold a node. It is the job's child, so it also goes
with the job; the operator deletes it as soon as the job finishes or is suspended, or the
annotation is removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..api import LABEL_CONTROLLER_UID, LABEL_JOB_NAME, LABEL_REPLICA_TYPE, JobRef, ReplicaType
from ..events import NORMAL, Event
from ..job_view import JobView
from ..observe import controller_uid
from ..resources import Resource, child_reader
from ..spec import JobSpec
from .base import Host, Integration, ObjectWrites, Outcome, Settled, Stage, Watched

#: The annotation by which a TFJob (of either API group) asks for a disruption budget.
ANNOTATION: Final = "tfjob.dev/disruption-budget"
POLICY: Final = "/apis/policy/v1"
PLURAL: Final = "poddisruptionbudgets"


@dataclass(frozen=True)
class BudgetObservation:
    """A PodDisruptionBudget of a job, as its watch shows it."""

    name: str
    uid: str
    owner_uid: str | None
    min_available: int | None = None


@dataclass(frozen=True)
class BudgetWrites:
    create: dict[str, Any] | None = None
    delete: list[tuple[BudgetObservation, str]] = field(default_factory=list)


def budget_name(job_name: str) -> str:
    return f"{job_name}-training"


def asks_for_budget(job: JobView) -> bool:
    return job.annotations.get(ANNOTATION) == "true"


def training_pods(spec: JobSpec) -> int:
    """The pods of every replica but the evaluator, which trains nothing."""
    return sum(
        replica.replicas
        for kind, replica in spec.replica_specs.items()
        if kind is not ReplicaType.EVALUATOR
    )


def render_budget(job: JobRef, spec: JobSpec) -> dict[str, Any]:
    """No voluntary eviction of the job's training pods, unless they are not ready."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": budget_name(job.name),
            "namespace": job.namespace,
            "labels": job.owned_labels(),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "minAvailable": training_pods(spec),
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {
                "matchLabels": {LABEL_CONTROLLER_UID: job.uid},
                "matchExpressions": [
                    {
                        "key": LABEL_REPLICA_TYPE,
                        "operator": "NotIn",
                        "values": [ReplicaType.EVALUATOR.label],
                    }
                ],
            },
        },
    }


def observe_budget(body: Mapping[str, Any]) -> BudgetObservation:
    metadata = body.get("metadata") or {}
    wanted = (body.get("spec") or {}).get("minAvailable")
    return BudgetObservation(
        metadata.get("name", ""),
        metadata.get("uid", ""),
        controller_uid(metadata),
        wanted if isinstance(wanted, int) else None,
    )


def plan_budget(
    job: JobView, spec: JobSpec | None, budgets: Sequence[BudgetObservation], outcome: Outcome
) -> BudgetWrites | None:
    """The job's budget while it runs and asks for one, of as many pods as it trains with
    (one of another count is deleted, and made again); gone otherwise."""
    mine = [b for b in budgets if b.owner_uid == job.ref.uid]
    if spec is None or not asks_for_budget(job):
        why = "the TFJob no longer asks for one"
    elif outcome.finished:
        why = "the TFJob has finished"
    elif outcome.suspended:
        why = "the TFJob is suspended"
    elif not mine:
        return BudgetWrites(create=render_budget(job.ref, spec))
    elif all(b.min_available == training_pods(spec) for b in mine):
        return None
    else:
        why = "the replicas changed: it is made again for their number"
    return BudgetWrites(delete=[(b, why) for b in mine]) if mine else None


class DisruptionBudget(Integration[tuple[BudgetObservation, ...], BudgetWrites]):
    """The job's training pods kept from voluntary eviction while it runs (the module's
    doc); it holds nothing back."""

    name = "disruption-budget"
    stage = Stage.BESIDE

    def watches(self) -> Sequence[Watched]:
        resource = Resource(PLURAL, POLICY, LABEL_JOB_NAME)
        return (Watched(resource, child_reader(observe_budget)),)

    async def observe(
        self, job: JobView, records: Sequence[Any], reads: Any, now: float
    ) -> tuple[BudgetObservation, ...]:
        return tuple(records)

    def preview(self, job: JobView, spec: JobSpec) -> Sequence[dict[str, Any]]:
        return (render_budget(job.ref, spec),) if asks_for_budget(job) else ()

    def settle(
        self,
        job: JobView,
        spec: JobSpec | None,
        observed: tuple[BudgetObservation, ...],
        outcome: Outcome,
        gate: Any,
    ) -> Settled[BudgetWrites] | None:
        writes = plan_budget(job, spec, observed, outcome)
        return None if writes is None else Settled(writes)

    async def apply(self, job: JobView, writes: BudgetWrites, host: Host) -> float | None:
        api: ObjectWrites = host.api
        namespace = job.ref.namespace
        for budget, why in writes.delete:
            host.forget_create("PodDisruptionBudget", budget.name)
            if await api.delete_object(namespace, POLICY, PLURAL, budget.name, budget.uid):
                host.record_deleted("PodDisruptionBudget", budget.name, why)
        body = writes.create
        if (
            body is not None
            and host.creating("PodDisruptionBudget", body["metadata"]["name"])
            and await api.create_object(namespace, POLICY, PLURAL, body)
        ):
            message = (
                f"Created PodDisruptionBudget {body['metadata']['name']}: a node drain "
                "waits for the job instead of evicting its training pods"
            )
            host.record(Event(NORMAL, "SuccessfulCreatePodDisruptionBudget", message))
        return None
