"""The TFJob spec as typed data: defaults and validation, the same as the CRD applies.

The API server already defaults and validates TFJobs with the CRD's schema and CEL rules.
The controller checks again because `tfjob-operator render` works without a cluster and
because an older CRD may be installed; the messages match the CRD's where they can.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .api import (
    CONTAINER_NAME,
    CleanPodPolicy,
    ReplicaType,
    RestartPolicy,
    SuccessPolicy,
)

#: Children are named `<job>-<type>-<index>`; Services need DNS-1035 labels.
MAX_CHILD_NAME = 63
#: The most replicas a TFJob may have, per type and in total (docs/status-and-metrics.md,
#: "Bounds"). Every pod's TF_CONFIG names every training replica, and Linux refuses to
#: start a process with an environment variable longer than 128 KiB: with the usual names
#: (about 45 bytes an address) that is about 2,900 replicas, with names at their limits
#: about 850. 1,000 keeps the usual job far inside it, bounds what one job costs the
#: operator (its pods are rendered and sent in batches, children.py), and is refused at
#: apply by the CRD; a job whose names still make TF_CONFIG too long fails before any pod
#: is created (tfconfig.oversized).
MAX_REPLICAS = 1000
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: Replica types in the order they are rendered and reported.
REPLICA_ORDER = (
    ReplicaType.CHIEF,
    ReplicaType.MASTER,
    ReplicaType.WORKER,
    ReplicaType.PS,
    ReplicaType.EVALUATOR,
)
#: The fields of runPolicy.schedulingPolicy only a gang scheduler reads (integrations/gang.py).
GANG_FIELDS = ("minAvailable", "queue", "minResources", "scheduleTimeoutSeconds")


class InvalidSpec(ValueError):
    """A TFJob the controller cannot run; `errors` name the field of each problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class Replica:
    """One member of the job: a pod and its service."""

    type: ReplicaType
    index: int

    def name(self, job_name: str) -> str:
        return f"{job_name}-{self.type.label}-{self.index}"

    @property
    def key(self) -> str:
        """Short id used in status and messages, e.g. `worker-1`."""
        return f"{self.type.label}-{self.index}"


@dataclass(frozen=True)
class ReplicaSpec:
    type: ReplicaType
    replicas: int
    restart_policy: RestartPolicy
    template: Mapping[str, Any]


@dataclass(frozen=True)
class SchedulingPolicy:
    """runPolicy.schedulingPolicy, Kubeflow's shape: all but priorityClass are gang options."""

    priority_class: str | None = None
    min_available: int | None = None
    queue: str | None = None
    min_resources: Mapping[str, Any] | None = None
    schedule_timeout_seconds: int | None = None

    @property
    def gang_fields(self) -> list[str]:
        """The gang options set, by their field names."""
        values = (self.min_available, self.queue, self.min_resources, self.schedule_timeout_seconds)
        return [name for name, value in zip(GANG_FIELDS, values, strict=True) if value is not None]


@dataclass(frozen=True)
class RunPolicy:
    clean_pod_policy: CleanPodPolicy
    ttl_seconds_after_finished: int | None
    active_deadline_seconds: int | None
    backoff_limit: int | None
    suspend: bool
    scheduling: SchedulingPolicy


@dataclass(frozen=True)
class JobSpec:
    replica_specs: Mapping[ReplicaType, ReplicaSpec]
    run_policy: RunPolicy
    success_policy: SuccessPolicy

    @property
    def chief_type(self) -> ReplicaType | None:
        return next((t for t in self.replica_specs if t.is_chief), None)

    @property
    def has_ps(self) -> bool:
        spec = self.replica_specs.get(ReplicaType.PS)
        return spec is not None and spec.replicas > 0

    @property
    def total_replicas(self) -> int:
        return sum(spec.replicas for spec in self.replica_specs.values())

    def replicas(self) -> Iterator[Replica]:
        """Every replica the job should have, in rendering order."""
        for spec in self.replica_specs.values():
            for index in range(spec.replicas):
                yield Replica(spec.type, index)

    def leader(self) -> Replica | None:
        """The replica whose success decides the job: the chief, else worker 0."""
        chief = self.chief_type
        if chief is not None and self.replica_specs[chief].replicas > 0:
            return Replica(chief, 0)
        worker = self.replica_specs.get(ReplicaType.WORKER)
        if worker is not None and worker.replicas > 0:
            return Replica(ReplicaType.WORKER, 0)
        return None


def parse_spec(name: str, spec: Mapping[str, Any]) -> JobSpec:
    """Applies the CRD's defaults to `spec` and validates it; raises InvalidSpec."""
    errors: list[str] = []
    errors.extend(_name_errors(name, spec))
    raw_replicas = spec.get("tfReplicaSpecs") or {}
    if not raw_replicas:
        errors.append("spec.tfReplicaSpecs: at least one replica type is required")
    replica_specs: dict[ReplicaType, ReplicaSpec] = {}
    allowed = {t.value for t in ReplicaType}
    for key, raw in raw_replicas.items():
        if key not in allowed:
            errors.append(
                f"spec.tfReplicaSpecs: unknown replica type {key!r}; "
                f"allowed: {', '.join(t.value for t in REPLICA_ORDER)}"
            )
            continue
        parsed, replica_errors = _parse_replica_spec(ReplicaType(key), raw or {})
        errors.extend(replica_errors)
        if parsed is not None:
            replica_specs[parsed.type] = parsed
    errors.extend(_topology_errors(replica_specs))
    run_policy, policy_errors = _parse_run_policy(spec.get("runPolicy") or {})
    errors.extend(policy_errors)
    if spec.get("enableDynamicWorker"):
        errors.append("spec.enableDynamicWorker: is not supported yet")
    success_raw = spec.get("successPolicy") or ""
    if success_raw not in {p.value for p in SuccessPolicy}:
        errors.append(f'spec.successPolicy: must be "" or "AllWorkers", got {success_raw!r}')
    if errors:
        raise InvalidSpec(errors)
    ordered = {t: replica_specs[t] for t in REPLICA_ORDER if t in replica_specs}
    return JobSpec(ordered, run_policy, SuccessPolicy(success_raw))


def _name_errors(name: str, spec: Mapping[str, Any]) -> list[str]:
    if not DNS_1035.match(name):
        return [
            f"metadata.name: {name!r} must be a DNS-1035 label prefix: lowercase letters, "
            "digits and '-', starting with a letter"
        ]
    errors = []
    for key, raw in (spec.get("tfReplicaSpecs") or {}).items():
        replicas = (raw or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 1:
            continue
        longest = f"{name}-{str(key).lower()}-{replicas - 1}"
        if len(longest) > MAX_CHILD_NAME:
            errors.append(
                f"metadata.name: too long: child name {longest!r} has {len(longest)} characters, "
                f"the limit is {MAX_CHILD_NAME}"
            )
    return errors


def _parse_replica_spec(
    replica_type: ReplicaType, raw: Mapping[str, Any]
) -> tuple[ReplicaSpec | None, list[str]]:
    path = f"spec.tfReplicaSpecs.{replica_type.value}"
    errors = []
    replicas = raw.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        errors.append(f"{path}.replicas: must be an integer >= 0, got {replicas!r}")
    elif replicas > MAX_REPLICAS:
        errors.append(f"{path}.replicas: {replicas} is more than the limit of {MAX_REPLICAS}")
    policy_raw = raw.get("restartPolicy") or RestartPolicy.NEVER.value
    if policy_raw not in {p.value for p in RestartPolicy}:
        errors.append(
            f"{path}.restartPolicy: must be one of Always, OnFailure, Never, ExitCode, "
            f"got {policy_raw!r}"
        )
    template = raw.get("template")
    if not isinstance(template, Mapping):
        errors.append(f"{path}.template: is required")
    else:
        containers = (template.get("spec") or {}).get("containers") or []
        main = next((c for c in containers if c.get("name") == CONTAINER_NAME), None)
        if main is None:
            errors.append(f"{path}.template.spec.containers: needs a container named 'tensorflow'")
        unnamed = [str(c.get("name")) for c in containers if not c.get("image")]
        if unnamed:
            errors.append(
                f"{path}.template.spec.containers: every container needs a non-empty image "
                f"({', '.join(unnamed)} has none)"
            )
    if errors:
        return None, errors
    assert isinstance(template, Mapping)
    return ReplicaSpec(replica_type, replicas, RestartPolicy(policy_raw), template), []


def _topology_errors(specs: Mapping[ReplicaType, ReplicaSpec]) -> list[str]:
    errors = []
    if ReplicaType.CHIEF in specs and ReplicaType.MASTER in specs:
        errors.append("spec.tfReplicaSpecs: Chief and Master are the same role; set only one")
    for chief in (ReplicaType.CHIEF, ReplicaType.MASTER, ReplicaType.EVALUATOR):
        if chief in specs and specs[chief].replicas > 1:
            errors.append(f"spec.tfReplicaSpecs.{chief.value}.replicas: must be at most 1")
    workers = specs[ReplicaType.WORKER].replicas if ReplicaType.WORKER in specs else 0
    if ReplicaType.PS in specs and specs[ReplicaType.PS].replicas > 0 and workers == 0:
        errors.append("spec.tfReplicaSpecs: PS needs Worker replicas to train")
    total = sum(spec.replicas for spec in specs.values())
    if total > MAX_REPLICAS:
        errors.append(
            f"spec.tfReplicaSpecs: the job has {total} replicas in total, more than the limit "
            f"of {MAX_REPLICAS}"
        )
    deciding = sum(specs[t].replicas for t in specs if t.is_chief or t is ReplicaType.WORKER)
    if specs and deciding == 0:
        errors.append(
            "spec.tfReplicaSpecs: needs at least one Chief, Master or Worker replica "
            "to decide success"
        )
    return errors


def _parse_run_policy(raw: Mapping[str, Any]) -> tuple[RunPolicy, list[str]]:
    errors = []
    clean_raw = raw.get("cleanPodPolicy") or CleanPodPolicy.RUNNING.value
    if clean_raw not in {p.value for p in CleanPodPolicy}:
        errors.append(
            f"spec.runPolicy.cleanPodPolicy: must be All, Running or None, got {clean_raw!r}"
        )
        clean_raw = CleanPodPolicy.RUNNING.value
    numbers: dict[str, int | None] = {}
    for field, minimum in (
        ("ttlSecondsAfterFinished", 0),
        ("activeDeadlineSeconds", 1),
        ("backoffLimit", 0),
    ):
        value = raw.get(field)
        if value is not None and (not isinstance(value, int) or value < minimum):
            errors.append(f"spec.runPolicy.{field}: must be an integer >= {minimum}")
            value = None
        numbers[field] = value
    scheduling, scheduling_errors = _parse_scheduling_policy(raw.get("schedulingPolicy") or {})
    errors.extend(scheduling_errors)
    policy = RunPolicy(
        clean_pod_policy=CleanPodPolicy(clean_raw),
        ttl_seconds_after_finished=numbers["ttlSecondsAfterFinished"],
        active_deadline_seconds=numbers["activeDeadlineSeconds"],
        backoff_limit=numbers["backoffLimit"],
        suspend=bool(raw.get("suspend", False)),
        scheduling=scheduling,
    )
    return policy, errors


def _parse_scheduling_policy(raw: Mapping[str, Any]) -> tuple[SchedulingPolicy, list[str]]:
    path = "spec.runPolicy.schedulingPolicy"
    errors = []
    numbers: dict[str, int | None] = {}
    for field in ("minAvailable", "scheduleTimeoutSeconds"):
        value = raw.get(field)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            errors.append(f"{path}.{field}: must be an integer >= 1, got {value!r}")
            value = None
        numbers[field] = value
    queue = raw.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue):
        errors.append(f"{path}.queue: must be a non-empty queue name, got {queue!r}")
        queue = None
    min_resources = raw.get("minResources")
    if min_resources is not None and not isinstance(min_resources, Mapping):
        errors.append(f"{path}.minResources: must map resource names to quantities")
        min_resources = None
    policy = SchedulingPolicy(
        priority_class=raw.get("priorityClass") or None,
        min_available=numbers["minAvailable"],
        queue=queue,
        min_resources=min_resources or None,
        schedule_timeout_seconds=numbers["scheduleTimeoutSeconds"],
    )
    return policy, errors
