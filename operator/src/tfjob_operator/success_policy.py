"""When a TFJob has succeeded: its leader (the chief, else worker 0) exited 0, or under
successPolicy AllWorkers, every worker did."""

from __future__ import annotations

from collections.abc import Mapping, Set

from .api import ReplicaType, SuccessPolicy
from .spec import JobSpec


def leader_succeeded(spec: JobSpec, succeeded: Mapping[str, Set[int]]) -> bool:
    """`succeeded`: the indexes that exited 0, by replica type."""
    leader = spec.leader()
    if leader is None:
        return False
    done = succeeded.get(leader.type.value, frozenset())
    if leader.type is ReplicaType.WORKER and spec.success_policy is SuccessPolicy.ALL_WORKERS:
        return done >= set(range(spec.replica_specs[ReplicaType.WORKER].replicas))
    return leader.index in done
