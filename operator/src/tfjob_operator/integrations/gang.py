"""Gang scheduling: a TFJob's pods placed all together, or none of them.

Workers of a synchronous job wait for each other; a job that got half its pods holds their
GPUs and trains nothing, and two such jobs can hold each other's forever. A gang scheduler
places the pods of one PodGroup together, once all (or `minAvailable`) of them fit:
scheduler-plugins' Coscheduling plugin reads `scheduling.x-k8s.io/v1alpha1` PodGroups,
Volcano reads `scheduling.volcano.sh/v1beta1` ones. The operator creates the job's PodGroup
before its pods, owned by the job, and names it in each pod the way that scheduler reads it.

The scheduler is chosen per job, not once per operator: the `schedulerName` of the job's pod
templates, else the operator's `--gang-scheduler-name` (Kubeflow's flag, which there enables
gang scheduling for every job at once). A job is gang-scheduled when its scheduler is one of
the operator's gang schedulers; runPolicy.schedulingPolicy's gang options on a job without
one are an error, not silently ignored.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from .. import quantity
from ..api import LABEL_JOB_NAME, GroupVersion, JobRef, ReplicaType
from ..job_view import JobView
from ..observe import PodGroupObservation, observe_pod_group
from ..resources import Resource, child_reader
from ..spec import InvalidSpec, JobSpec, Replica
from . import base as gates
from .base import Dressing, Gate, Host, Integration, Outcome, Settled, Stage, Watched

#: The scheduler names the two gang schedulers are deployed under by default.
SCHEDULER_PLUGINS_NAME: Final = "scheduler-plugins-scheduler"
VOLCANO_NAME: Final = "volcano"
#: Kubeflow's `--gang-scheduler-name` value for scheduler-plugins, which its pods then name
#: as SCHEDULER_PLUGINS_NAME.
KUBEFLOW_SCHEDULER_PLUGINS: Final = "scheduler-plugins"
DEFAULT_SCHEDULER: Final = "default-scheduler"
#: The Volcano Queue of a PodGroup that names none, as Volcano's webhook and Kubeflow set it.
VOLCANO_DEFAULT_QUEUE: Final = "default"


@dataclass(frozen=True)
class PodGroupApi(GroupVersion):
    """The PodGroup one gang scheduler reads, and how a pod names its group there."""

    #: What the operator's messages call the scheduler.
    title: str
    #: The pod label naming the group (scheduler-plugins) or else the annotation (Volcano).
    pod_label: str | None = None
    pod_annotation: str | None = None
    #: Volcano's annotation naming the pod's task: its replica type, as in minTaskMember.
    task_annotation: str | None = None


SCHEDULER_PLUGINS: Final = PodGroupApi(
    "scheduling.x-k8s.io",
    "v1alpha1",
    "scheduler-plugins",
    pod_label="scheduling.x-k8s.io/pod-group",
)
VOLCANO: Final = PodGroupApi(
    "scheduling.volcano.sh",
    "v1beta1",
    "Volcano",
    pod_annotation="scheduling.k8s.io/group-name",
    task_annotation="volcano.sh/task-spec",
)
POD_GROUP_APIS: Final = (SCHEDULER_PLUGINS, VOLCANO)


@dataclass(frozen=True)
class GangSchedulers:
    """The operator's gang schedulers by scheduler name, and the default one (if any)."""

    by_name: Mapping[str, PodGroupApi]
    default: str | None

    @classmethod
    def configure(
        cls, default: str | None = None, scheduler_plugins_name: str = SCHEDULER_PLUGINS_NAME
    ) -> GangSchedulers:
        """From the operator's flags; raises ValueError for a default it does not know."""
        by_name = {scheduler_plugins_name: SCHEDULER_PLUGINS, VOLCANO_NAME: VOLCANO}
        if default == KUBEFLOW_SCHEDULER_PLUGINS:
            default = scheduler_plugins_name
        if default is not None and default not in by_name:
            raise ValueError(
                f"--gang-scheduler-name {default!r} is not a gang scheduler: use "
                f"{' or '.join(sorted(by_name))}"
            )
        return cls(by_name, default or None)

    def describe(self) -> str:
        return ", ".join(f"{name} ({api.title})" for name, api in sorted(self.by_name.items()))


#: The gang schedulers under their usual names, none of them the default.
USUAL_GANG_SCHEDULERS: Final = GangSchedulers.configure()


@dataclass(frozen=True)
class Gang:
    """What the job's PodGroup and pods say about placing them together."""

    scheduler_name: str
    api: PodGroupApi
    min_member: int
    #: The job's replica count: a kubeflow.org job may ask for a larger gang (min_member).
    job_replicas: int
    #: Volcano: the pods each replica type needs placed, when the whole job is the gang.
    min_task_member: Mapping[str, int]
    queue: str | None
    priority_class: str | None
    min_resources: Mapping[str, Any] | None
    schedule_timeout_seconds: int | None

    @property
    def larger_than_job(self) -> bool:
        """The gang can never be complete: none of its pods could be placed."""
        return self.min_member > self.job_replicas

    def describe(self, job_name: str) -> str:
        return (
            f"PodGroup {pod_group_name(job_name)} ({self.api.title}, "
            f"{self.min_member} pods together)"
        )

    def cannot_place(self, job_name: str, why: str) -> str:
        """A scheduler's word that a pod cannot be placed, said of the gang."""
        return f"The gang cannot be placed ({self.describe(job_name)}): {why}"


def pod_group_name(job_name: str) -> str:
    """Named after its TFJob, as Kubeflow names it: one PodGroup per job."""
    return job_name


def job_gang(spec: JobSpec, schedulers: GangSchedulers) -> Gang | None:
    """The gang of a job, None if it is not gang-scheduled; raises InvalidSpec for options
    its scheduler cannot honour (see the module docstring)."""
    policy = spec.run_policy.scheduling
    chosen: dict[ReplicaType, str | None] = {
        t: (replica.template.get("spec") or {}).get("schedulerName") or schedulers.default
        for t, replica in spec.replica_specs.items()
    }
    gangs = [name for name in chosen.values() if name is not None and name in schedulers.by_name]
    policy_path = "spec.runPolicy.schedulingPolicy"
    if not gangs:
        named = sorted({name for name in chosen.values() if name})
        where = (
            f"the replicas name {', '.join(named)}, not a gang scheduler"
            if named
            else "the replicas name no scheduler and the operator has no --gang-scheduler-name"
        )
        if policy.gang_fields:
            raise InvalidSpec(
                [
                    f"{policy_path}.{name}: needs a gang scheduler, but {where}; this operator "
                    f"gang-schedules with {schedulers.describe()}"
                    for name in policy.gang_fields
                ]
            )
        return None
    errors = []
    scheduler = gangs[0]
    for replica_type, name in chosen.items():
        if name != scheduler:
            errors.append(
                f"spec.tfReplicaSpecs.{replica_type.value}.template.spec.schedulerName: "
                f"{name or DEFAULT_SCHEDULER}, but the job's other replicas are gang-scheduled "
                f"by {scheduler}: a gang has one scheduler"
            )
    api = schedulers.by_name[scheduler]
    if api is SCHEDULER_PLUGINS and policy.queue is not None:
        errors.append(
            f"{policy_path}.queue: scheduler-plugins has no queues (Volcano has); queue the "
            "job in Kueue instead"
        )
    if api is VOLCANO and policy.schedule_timeout_seconds is not None:
        errors.append(
            f"{policy_path}.scheduleTimeoutSeconds: Volcano's PodGroup has no schedule "
            "timeout (scheduler-plugins' has)"
        )
    if errors:
        raise InvalidSpec(errors)
    total = spec.total_replicas
    min_member = policy.min_available or total
    min_resources = policy.min_resources
    if min_resources is None and api is VOLCANO and min_member == total:
        min_resources = job_requests(spec) or None
    return Gang(
        scheduler_name=scheduler,
        api=api,
        min_member=min_member,
        job_replicas=total,
        min_task_member=(
            {t.label: s.replicas for t, s in spec.replica_specs.items() if s.replicas > 0}
            if min_member == total
            else {}
        ),
        queue=policy.queue,
        priority_class=policy.priority_class,
        min_resources=min_resources,
        schedule_timeout_seconds=policy.schedule_timeout_seconds,
    )


def job_requests(spec: JobSpec) -> dict[str, str]:
    """What all the job's pods request together: a Volcano gang of the whole job states it
    as its minResources (as Kubeflow's operator does), which Volcano checks against its
    queue's capacity before it places any pod.

    Not for scheduler-plugins: its Coscheduling plugin (v0.33) checks minResources before
    it tries a node, and a gang refused there is tried again only when a pod is added or
    at the scheduler's periodic flush of unschedulable pods (5 minutes by default), not
    when capacity frees; without it, the gang is tried again as soon as a pod goes.
    """
    return quantity.add(
        pod_requests(replica.template)
        for replica in spec.replica_specs.values()
        for _ in range(replica.replicas)
    )


def pod_requests(template: Mapping[str, Any]) -> dict[str, str]:
    """The requests of a pod's containers; a limit stands for a request the container does
    not set, as the API server defaults it."""
    containers = (template.get("spec") or {}).get("containers") or []
    listings = []
    for container in containers:
        resources = container.get("resources") or {}
        listings.append({**(resources.get("limits") or {}), **(resources.get("requests") or {})})
    return quantity.add(listings)


def pod_group_spec(gang: Gang) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": gang.min_member}
    if gang.min_resources:
        spec["minResources"] = dict(gang.min_resources)
    if gang.api is SCHEDULER_PLUGINS:
        if gang.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = gang.schedule_timeout_seconds
        return spec
    if gang.min_task_member:
        spec["minTaskMember"] = dict(gang.min_task_member)
    spec["queue"] = gang.queue or VOLCANO_DEFAULT_QUEUE
    if gang.priority_class:
        spec["priorityClassName"] = gang.priority_class
    return spec


def join_gang(pod: dict[str, Any], job_name: str, replica: Replica, gang: Gang) -> None:
    """Names the gang's scheduler and PodGroup in a pod being rendered."""
    metadata = pod["metadata"]
    pod["spec"].setdefault("schedulerName", gang.scheduler_name)
    group = pod_group_name(job_name)
    if gang.api.pod_label:
        metadata.setdefault("labels", {})[gang.api.pod_label] = group
    annotations = {}
    if gang.api.pod_annotation:
        annotations[gang.api.pod_annotation] = group
    if gang.api.task_annotation:
        annotations[gang.api.task_annotation] = replica.type.label
    if annotations:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}


def render_pod_group(job: JobRef, gang: Gang) -> dict[str, Any]:
    """The PodGroup the gang's scheduler places the job's pods by."""
    return {
        "apiVersion": gang.api.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(job.name),
            "namespace": job.namespace,
            "labels": job.owned_labels(),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": pod_group_spec(gang),
    }


#: The reason of a job's Running=False condition and event while its gang cannot be placed.
GANG_UNSCHEDULABLE: Final = "GangUnschedulable"


@dataclass(frozen=True)
class PodGroupWrites:
    """A decision's writes of the job's PodGroups: one to create, a spec change of the
    job's PodGroup (the replica counts changed), and those to delete with why."""

    create: dict[str, Any] | None = None
    patch: tuple[PodGroupObservation, dict[str, Any]] | None = None
    delete: list[tuple[PodGroupObservation, str]] = field(default_factory=list)


def gate(
    job: JobRef, gang: Gang, pod_groups: Sequence[PodGroupObservation]
) -> Gate[PodGroupWrites]:
    """The gang's gate for the job's pods: it creates or updates the gang's PodGroup, and
    opens once the watch shows it as the gang wants it.

    The gang scheduler reads PodGroups from a cache of its own, which an event about them
    may overtake (scheduler-plugins' Coscheduling does): a pod it sees first is judged
    against no PodGroup, or the old one, and is parked as unschedulable until some later
    event or its periodic flush, minutes on. So the PodGroup goes first and the pods follow
    once it has come back through a watch. The gate stays closed while the gang is larger
    than the job: none of its pods could be placed. A PodGroup of the same name owned by an
    earlier TFJob is going away with it: the pods wait until it has. Once open, it names
    the gang's scheduler and PodGroup in each pod.
    """
    named = [g for g in pod_groups if g.api_version == gang.api.api_version]
    own = next((g for g in named if g.owner_uid == job.uid), None)
    if own is None:
        create = None if named else render_pod_group(job, gang)
        return gates.waiting(PodGroupWrites(create=create))
    changed = {k: v for k, v in pod_group_spec(gang).items() if own.spec.get(k) != v}
    if changed:
        return gates.waiting(PodGroupWrites(patch=(own, {"spec": changed})))
    if gang.larger_than_job:
        return gates.waiting(PodGroupWrites(), _larger_than_job(gang))
    return gates.opened(PodGroupWrites(), functools.partial(_join, job.name, gang))


def _join(job_name: str, gang: Gang, pod: dict[str, Any], replica: Replica) -> None:
    join_gang(pod, job_name, replica, gang)


def released(
    job: JobRef,
    gang: Gang | None,
    pod_groups: Sequence[PodGroupObservation],
    *,
    finished: bool,
    suspended: bool,
) -> list[tuple[PodGroupObservation, str]]:
    """The job's PodGroups it no longer needs, and why: all once it has finished or is
    suspended (made again on resume), else those of a scheduler it no longer uses."""
    if finished:
        wanted, why = None, "the TFJob has finished"
    elif suspended:
        wanted, why = None, "the TFJob is suspended"
    else:
        wanted = gang.api.api_version if gang is not None else None
        why = "the TFJob is not gang-scheduled by it any more"
    return [(g, why) for g in pod_groups if g.owner_uid == job.uid and g.api_version != wanted]


def why_waiting(
    job: JobRef, gang: Gang | None, pod_groups: Sequence[PodGroupObservation]
) -> str | None:
    """Why the gang cannot be placed, as its own size or its PodGroup says; None if
    neither does (scheduler-plugins says it on the pods)."""
    if gang is None:
        return None
    if gang.larger_than_job:
        return _larger_than_job(gang)
    return next((g.unschedulable for g in pod_groups if g.owner_uid == job.uid), None)


def _larger_than_job(gang: Gang) -> str:
    # Accepted under kubeflow.org, as Kubeflow accepts it (tfjob.dev's CRD refuses it).
    return (
        f"spec.runPolicy.schedulingPolicy.minAvailable is {gang.min_member}, more than "
        f"the job's {gang.job_replicas} replicas: the gang cannot be complete until "
        "minAvailable is lowered"
    )


@dataclass(frozen=True)
class Ganged:
    """What a decision reads of gang scheduling for one job: its gang (None: not
    gang-scheduled, or its spec invalid), why its gang options are invalid, its PodGroups."""

    gang: Gang | None = None
    invalid: InvalidSpec | None = None
    pod_groups: tuple[PodGroupObservation, ...] = ()


def observation(
    spec: JobSpec | InvalidSpec,
    pod_groups: Sequence[PodGroupObservation],
    schedulers: GangSchedulers,
) -> Ganged:
    if isinstance(spec, InvalidSpec):
        return Ganged(pod_groups=tuple(pod_groups))
    try:
        return Ganged(job_gang(spec, schedulers), pod_groups=tuple(pod_groups))
    except InvalidSpec as error:
        return Ganged(invalid=error, pod_groups=tuple(pod_groups))


class PodGroupApiWrites(Protocol):
    """The writes of PodGroups (kube.Kube)."""

    async def create_pod_group(self, namespace: str, body: Mapping[str, Any]) -> bool: ...
    async def patch_pod_group(
        self, namespace: str, group: PodGroupObservation, patch: Mapping[str, Any]
    ) -> None: ...
    async def delete_pod_group(self, namespace: str, group: PodGroupObservation) -> bool: ...


class GangScheduling(Integration[Ganged, PodGroupWrites]):
    """A job's pods wait for its PodGroup, of the gang scheduler the job names (the
    module's doc): scheduler-plugins' Coscheduling or Volcano, chosen per job."""

    name = "gang"
    stage = Stage.PODS

    def __init__(self, schedulers: GangSchedulers = USUAL_GANG_SCHEDULERS) -> None:
        self.schedulers = schedulers

    def watches(self) -> Sequence[Watched]:
        # A gang scheduler's CRD may not be installed: the watches are optional.
        return tuple(
            Watched(
                Resource("podgroups", group.path, LABEL_JOB_NAME, optional=True),
                child_reader(observe_pod_group),
            )
            for group in POD_GROUP_APIS
        )

    async def observe(self, job: JobView, records: Sequence[Any], reads: Any, now: float) -> Ganged:
        return observation(job.parsed, records, self.schedulers)

    def check(self, job: JobView, spec: JobSpec, observed: Ganged) -> InvalidSpec | None:
        return observed.invalid

    def preview(self, job: JobView, spec: JobSpec) -> Sequence[dict[str, Any]]:
        gang = job_gang(spec, self.schedulers)
        return () if gang is None else (render_pod_group(job.ref, gang),)

    def preview_dress(self, job: JobView, spec: JobSpec) -> Dressing | None:
        gang = job_gang(spec, self.schedulers)
        return None if gang is None else functools.partial(_join, job.ref.name, gang)

    def gate(
        self, job: JobView, spec: JobSpec, observed: Ganged, *, pods_exist: bool, now: str
    ) -> Gate[PodGroupWrites] | None:
        if observed.gang is None:
            return None
        return gate(job.ref, observed.gang, observed.pod_groups)

    def pods_wait_why(
        self, job: JobView, observed: Ganged, pods_say: tuple[str, str] | None
    ) -> tuple[str, str] | None:
        """The PodGroup's word, or the scheduler's on a pod, said of the gang."""
        gang = observed.gang
        if gang is None:
            return None
        said = why_waiting(job.ref, gang, observed.pod_groups)
        if said is None:
            if pods_say is None or pods_say[0] not in ("Unschedulable", GANG_UNSCHEDULABLE):
                return None
            said = pods_say[1]
        return GANG_UNSCHEDULABLE, gang.cannot_place(job.ref.name, said)

    def settle(
        self,
        job: JobView,
        spec: JobSpec | None,
        observed: Ganged,
        outcome: Outcome,
        gate: Gate[PodGroupWrites] | None,
    ) -> Settled[PodGroupWrites] | None:
        """The gate's writes, and the PodGroups the job no longer needs."""
        delete = released(
            job.ref,
            observed.gang if spec is not None else None,
            observed.pod_groups,
            finished=outcome.finished,
            suspended=outcome.suspended,
        )
        if gate is None and not delete:
            return None
        writes = gate.writes if gate is not None else PodGroupWrites()
        return Settled(dataclasses.replace(writes, delete=delete))

    async def apply(self, job: JobView, writes: PodGroupWrites, host: Host) -> float | None:
        """Deletes, the spec patch, then the PodGroup to create, before the pods."""
        api: PodGroupApiWrites = host.api
        namespace = job.ref.namespace
        for group, why in writes.delete:
            if await api.delete_pod_group(namespace, group):
                host.record_deleted("PodGroup", f"{group.name} ({group.api_version})", why)
        if writes.patch is not None:
            group, patch = writes.patch
            await api.patch_pod_group(namespace, group, patch)
        body = writes.create
        if body is not None:
            await host.create_prerequisite(
                body,
                api.create_pod_group,
                missing="is its gang scheduler installed? The job's pods wait for their PodGroup",
                created=f"for its {body['spec']['minMember']} pods: they are placed together",
            )
        return None
