"""A TFJob as the operator's decisions read it: its identity, spec and status, and the
labels and annotations its integrations read (a Kueue queue, a TensorBoard).

Parsed once per version of the object, held by the watch cache, and read by `decide` and
by each integration: one view, so that every part of a decision reads the same object.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .api import (
    KUEUE_PREBUILT_WORKLOAD,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    TFJOB_DEV,
    JobRef,
    TFJobApi,
    manager_of,
)
from .spec import InvalidSpec, JobSpec, parse_spec


@dataclass(frozen=True)
class JobView:
    """The parts of a TFJob object the decision reads."""

    ref: JobRef
    resource_version: str
    generation: int
    deleting: bool
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    #: metadata.creationTimestamp: of two TFJobs of one name, the older holds the name.
    created: str = ""
    #: The Kueue LocalQueue the job is queued in (KUEUE_QUEUE_LABEL), if any.
    queue: str | None = None
    #: The WorkloadPriorityClass its Workload takes (KUEUE_PRIORITY_CLASS_LABEL), if any.
    priority_class: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: The controller that runs the job, if not this operator (api.manager_of): here, only
    #: MultiKueue, which dispatches it to a worker cluster.
    managed_by: str | None = None
    #: The Workload MultiKueue made for the job on this worker cluster, if it did.
    prebuilt_workload: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any], api: TFJobApi = TFJOB_DEV) -> JobView:
        metadata = body.get("metadata") or {}
        labels = metadata.get("labels") or {}
        return cls(
            ref=JobRef(metadata["namespace"], metadata["name"], metadata["uid"], api),
            created=str(metadata.get("creationTimestamp") or ""),
            queue=labels.get(KUEUE_QUEUE_LABEL),
            priority_class=labels.get(KUEUE_PRIORITY_CLASS_LABEL),
            managed_by=manager_of(body),
            prebuilt_workload=(
                (metadata.get("annotations") or {}).get(KUEUE_PREBUILT_WORKLOAD)
                or labels.get(KUEUE_PREBUILT_WORKLOAD)
            ),
            annotations=metadata.get("annotations") or {},
            resource_version=str(metadata.get("resourceVersion") or ""),
            generation=int(metadata.get("generation") or 0),
            deleting=metadata.get("deletionTimestamp") is not None,
            spec=body.get("spec") or {},
            status=body.get("status") or {},
        )

    @functools.cached_property
    def parsed(self) -> JobSpec | InvalidSpec:
        """The spec, parsed once per version of the object: a job is decided again at
        every change of its pods, far more often than the job itself changes."""
        try:
            return parse_spec(self.ref.name, self.spec)
        except InvalidSpec as error:
            return error
