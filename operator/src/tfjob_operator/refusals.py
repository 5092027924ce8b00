"""The API server's refusals of a job's pods and services, remembered between reconciles.

A child the API server refuses is the job's problem, not the operator's: an invalid pod
(a mount of no volume, a request above its limit), or an admission that says no (a service
account that does not exist, a quota exceeded, a policy). The controller records each
refusal here, tries the child again with backoff, and `decide` names it in the job's
conditions, so that `kubectl get tfj`, a notebook and Kubeflow's SDK see why the job does
not run.

Two kinds, told apart by the status code:
- permanent: 400 BadRequest and 422 Invalid. The API server judges the pod as the spec
  renders it, and will judge it alike whatever else changes in the cluster; only an edit of
  the TFJob can. The job fails once the refusal has lasted the grace period (`decide`).
- waiting: 403 Forbidden and 404 NotFound. An administrator (a service account, a larger
  quota, a policy) or another object appearing fixes them: the job waits, saying why.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from .backoff import retry_delay

#: Status codes that refuse the object itself: only a changed spec can be accepted.
PERMANENT_STATUSES: Final = frozenset({400, 422})
#: Seconds before a refused child is tried again: doubled at each refusal, up to the most
#: (backoff.py: jittered).
FIRST_RETRY_SECONDS: Final = 2.0
MAX_RETRY_SECONDS: Final = 60.0


@dataclass(frozen=True)
class Refusal:
    kind: str
    #: The replica the child belongs to: worker-0, chief-0, ...
    replica: str
    status: int
    #: The API server's reason (Invalid, Forbidden, ...) and message.
    reason: str
    message: str
    #: The TFJob's metadata.generation the child was rendered from.
    generation: int
    #: The first refusal of this child with this status code.
    since: datetime
    #: Refusals of this child in a row.
    count: int

    @property
    def permanent(self) -> bool:
        return self.status in PERMANENT_STATUSES

    @property
    def condition_reason(self) -> str:
        """FailedCreatePod or FailedCreateService, as Kubernetes' controllers say it."""
        return f"FailedCreate{self.kind.title()}"

    def describe(self) -> str:
        why = f"{self.status} {self.reason}".strip()
        return f"{self.replica}: the API server refused its {self.kind} ({why}): {self.message}"


@dataclass
class _Entry:
    refusal: Refusal
    #: When the child may be tried again (monotonic seconds).
    retry_at: float


#: A child: its kind (pod, service) and name; a pod and its service share the name.
Child = tuple[str, str]


class Refusals:
    """One job's refused children."""

    def __init__(self, uniform: Callable[[], float] = random.random) -> None:
        self._entries: dict[Child, _Entry] = {}
        #: The random draw of each retry's jitter (backoff.py).
        self._uniform = uniform

    def record(self, refusal: Refusal, name: str, monotonic: float) -> tuple[Refusal, bool]:
        """Remembers `refusal` (a first one, count 1) of child `name`; returns what is kept,
        and True when the child was not refused so before (the caller logs it once, not at
        every retry). A refusal like the last one keeps its `since` and counts up."""
        child = (refusal.kind, name)
        entry = self._entries.get(child)
        previous = entry.refusal if entry else None
        same = previous is not None and (
            previous.status,
            previous.reason,
            previous.generation,
        ) == (refusal.status, refusal.reason, refusal.generation)
        if previous is not None and same:
            refusal = replace(previous, message=refusal.message, count=previous.count + 1)
        delay = retry_delay(
            refusal.count, FIRST_RETRY_SECONDS, MAX_RETRY_SECONDS, uniform=self._uniform
        )
        self._entries[child] = _Entry(refusal, monotonic + delay)
        return refusal, not same

    def accepted(self, child: Child) -> None:
        self._entries.pop(child, None)

    def __iter__(self) -> Iterator[Refusal]:
        return iter([e.refusal for e in self._entries.values()])

    def keep_only(self, children: Collection[Child]) -> None:
        """Forgets the children not given: the job no longer creates them (it finished, was
        suspended, or the child exists)."""
        for child in [c for c in self._entries if c not in children]:
            del self._entries[child]

    def backing_off(self, child: Child, generation: int, monotonic: float) -> bool:
        """Whether `child` waits before it is tried again (a new generation need not)."""
        entry = self._entries.get(child)
        return (
            entry is not None
            and entry.refusal.generation == generation
            and monotonic < entry.retry_at
        )

    def retry_in(self, child: Child, monotonic: float) -> float:
        """Seconds until `child` is tried again."""
        entry = self._entries.get(child)
        return max(0.0, entry.retry_at - monotonic) if entry else 0.0

    def next_retry(self, monotonic: float) -> float | None:
        """Seconds until the earliest refused child may be tried again."""
        if not self._entries:
            return None
        return max(0.0, min(e.retry_at for e in self._entries.values()) - monotonic)

    def __bool__(self) -> bool:
        return bool(self._entries)
