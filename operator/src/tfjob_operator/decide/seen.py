"""What one decision reads, frozen: the job, its children, the integrations' observations,
the API server's refusals and the time. Every step of the decision reads it; none changes
it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..api import JobRef
from ..integrations.base import Observation, Stage
from ..job_view import JobView
from ..limits import INVALID_POD_GRACE_SECONDS
from ..observe import PodObservation, ServiceObservation
from ..refusals import Refusal
from ..stops import Stop, latest
from ..timeutil import to_rfc3339


@dataclass(frozen=True)
class Seen:
    job: JobView
    now: datetime
    cluster_domain: str | None = None
    #: The job's own children (owned by its uid).
    pods: tuple[PodObservation, ...] = ()
    services: tuple[ServiceObservation, ...] = ()
    #: Names held by any child of the job's name, an earlier TFJob's of that name included:
    #: a child is not created while its name is taken.
    occupied_pod_names: frozenset[str] = frozenset()
    occupied_service_names: frozenset[str] = frozenset()
    #: What each integration observed, in the integrations' order.
    observations: tuple[Observation, ...] = ()
    #: The API server's refusals of children rendered from this generation (refusals.py).
    refusals: tuple[Refusal, ...] = ()
    invalid_grace: timedelta = timedelta(seconds=INVALID_POD_GRACE_SECONDS)
    #: The latest checkpoint a replica reported as it stopped (stops.py): from the pods,
    #: or from one deleted since.
    stopped: Stop | None = None

    @classmethod
    def of(
        cls,
        job: JobView,
        pods: Sequence[PodObservation],
        services: Sequence[ServiceObservation],
        now: datetime,
        cluster_domain: str | None,
        *,
        observations: Sequence[Observation] = (),
        refusals: Sequence[Refusal] = (),
        invalid_grace: timedelta = timedelta(seconds=INVALID_POD_GRACE_SECONDS),
        stopped: Stop | None = None,
    ) -> Seen:
        own_pods = tuple(p for p in pods if p.owner_uid == job.ref.uid)
        return cls(
            job,
            now,
            cluster_domain,
            pods=own_pods,
            services=tuple(s for s in services if s.owner_uid == job.ref.uid),
            occupied_pod_names=frozenset(p.name for p in pods),
            occupied_service_names=frozenset(s.name for s in services),
            observations=tuple(observations),
            refusals=tuple(r for r in refusals if r.generation == job.generation),
            invalid_grace=invalid_grace,
            stopped=latest(stopped, *(p.stopped for p in own_pods)),
        )

    @property
    def ref(self) -> JobRef:
        return self.job.ref

    @functools.cached_property
    def now_text(self) -> str:
        return to_rfc3339(self.now)

    @property
    def id(self) -> str:
        """namespace/name, as messages name the job."""
        return f"{self.ref.namespace}/{self.ref.name}"

    def at(self, stage: Stage) -> list[Observation]:
        """The observations of the integrations at `stage`."""
        return [seen for seen in self.observations if seen.integration.stage is stage]
