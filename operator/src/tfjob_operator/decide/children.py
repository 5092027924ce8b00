"""Which children a decision creates and deletes: pods of a replica no longer wanted or of
an older generation go; absent pods and services are created, once nothing waits; the
clean-up policy of a finished job."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import CleanPodPolicy as Clean
from ..api import ConditionType, JobRef, ReplicaType
from ..events import NORMAL
from ..integrations.base import Gate
from ..observe import PodObservation
from ..plan import Creation
from ..render import render_pod, render_service
from ..spec import JobSpec, Replica
from ..tfconfig import JobConfigs
from .draft import Draft
from .seen import Seen


@dataclass(frozen=True)
class Sorted:
    """The job's pods against its spec."""

    draft: Draft
    #: The pod of each replica of the spec, by replica key, of its current generation.
    current: Mapping[str, PodObservation]
    #: Pods of a replica of the spec that must be replaced (deleted in `draft`).
    stale: tuple[PodObservation, ...]


def sort_pods(
    seen: Seen, draft: Draft, desired: Mapping[str, Replica], digests: Mapping[str, str]
) -> Sorted:
    """Deletes the pods of a replica no longer in the spec, of an older generation, or
    rendered for another set of replicas (their TF_CONFIG is wrong); the replica counts
    changing restarts the job's replicas with a new TF_CONFIG."""
    current: dict[str, PodObservation] = {}
    stale: list[PodObservation] = []
    for pod in seen.pods:
        key = pod.replica.key if pod.replica else None
        if key is None or key not in desired:
            gone = "the replica is no longer in the spec"
            draft = draft.deleting_pod(seen, pod, gone).deleting_service_of(seen, pod.name, gone)
        elif pod.generation < draft.generations.get(key, 0):
            stale.append(pod)
            draft = draft.deleting_pod(seen, pod, "the replica is restarting")
        elif pod.cluster_digest != digests[key]:
            stale.append(pod)
            why = "the cluster changed: TF_CONFIG must be rendered again"
            draft = draft.deleting_pod(seen, pod, why)
        else:
            current[key] = pod
    if any(p.cluster_digest != digests.get(p.replica.key if p.replica else "") for p in stale):
        message = "The replica counts changed: recreating the replicas with a new TF_CONFIG"
        previous = draft.condition(ConditionType.RESTARTING)
        if not previous or (previous.get("status"), previous.get("reason")) != (
            "True",
            "ReplicasChanged",
        ):
            draft = draft.reporting(NORMAL, "ReplicasChanged", message)
        draft = draft.setting(seen, ConditionType.RESTARTING, True, "ReplicasChanged", message)
    return Sorted(draft, current, tuple(stale))


def create_missing(
    seen: Seen,
    spec: JobSpec,
    configs: JobConfigs,
    draft: Draft,
    desired: Mapping[str, Replica],
    current: Mapping[str, PodObservation],
    stale: Sequence[PodObservation],
    *,
    pods_wait: bool,
) -> Draft:
    """Creates absent pods and services; a restarting group waits for its old pods, and
    every pod for a gate when `pods_wait`; the gates passed dress the pods. The creates are
    gathered and added to the draft once: a job may have thousands of replicas."""
    training_blocked = any(
        p.replica is not None and p.replica.type is not ReplicaType.EVALUATOR for p in stale
    )
    gates = draft.passed
    services: list[Creation] = []
    pods: list[tuple[Replica, Creation]] = []
    for key, replica in desired.items():
        name = replica.name(seen.ref.name)
        if name not in seen.occupied_service_names:
            render = functools.partial(render_service, seen.ref, spec, replica)
            services.append(Creation(name, render))
        if pods_wait or draft.succeeded_in(replica):
            continue
        if key in current or name in seen.occupied_pod_names:
            continue
        if training_blocked and replica.type is not ReplicaType.EVALUATOR:
            continue
        render = functools.partial(
            _dressed_pod,
            seen.ref,
            spec,
            replica,
            draft.generations.get(key, 0),
            seen.cluster_domain,
            configs,
            gates,
        )
        pods.append((replica, Creation(name, render)))
    return draft.creating_children(services, pods)


def clean_up(
    seen: Seen, draft: Draft, policy: Clean, finished: bool, keep: frozenset[str] = frozenset()
) -> Draft:
    """Applies cleanPodPolicy; services go with their pods (all of them under All).

    Once the job is finished, its children may go in one request per kind (see
    `Deletion.collectable`): nothing of a finished job is left to run.
    """
    if policy is Clean.NONE:
        return draft
    why = f"cleanPodPolicy {policy.value}"
    for pod in seen.pods:
        if pod.name in keep or pod.terminating:
            continue
        if policy is Clean.ALL or pod.active:
            draft = draft.deleting_pod(seen, pod, why, collectable=finished)
            draft = draft.deleting_service_of(seen, pod.name, why, collectable=finished)
    if policy is Clean.ALL and finished:
        for service in seen.services:
            draft = draft.deleting_service(seen, service, why, collectable=True)
    return draft


def delete_all(seen: Seen, draft: Draft, why: str) -> Draft:
    """Every pod and service of the job deleted (a suspended job keeps none)."""
    for pod in seen.pods:
        draft = draft.deleting_pod(seen, pod, why)
    for service in seen.services:
        draft = draft.deleting_service(seen, service, why)
    return draft


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
