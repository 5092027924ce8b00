"""One decision's writes of a job's pods and services.

Pods and services are created and deleted alike; what differs is the API call, the
counter and the noun in events, which `ChildKind` holds, so that the flow is written once
(`ChildWrites`). Deletes run concurrently. Creates go out in batches of 1, 2, 4, ...
replicas (a replica's service and pod together), as Kubernetes' Job controller creates a
Job's pods, and stop at the first batch in which one failed: a template the API server
refuses costs one request, not one per replica, and a job of a thousand replicas renders
and holds one batch of pods at a time, while other jobs' writes get their turn between its
batches. Events name every child an action
touched rather than one event per child: a job of a hundred workers gets a readable
`kubectl describe`, and the API server half the requests. A finished job's clean-up is one
collection delete per kind, run beside the job's worker. A child the API server refuses is
handed back (`Host.refused`, refusals.py), not raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from .api import JobRef
from .apiserver.errors import ApiError
from .backoff import jittered
from .events import NORMAL, WARNING, Event
from .plan import Creation, Deletion

logger = logging.getLogger(__name__)

#: A collection delete must name the children it keeps; past this many, the children are
#: deleted one by one instead.
MAX_KEPT_IN_COLLECTION_DELETE: Final = 50
#: A clean-up that failed is decided again after this long.
CLEANUP_RETRY_SECONDS: Final = 5.0
#: The most replicas one batch of creates holds (slow start doubles up to it): twice the
#: writes the operator has in flight, so that a batch keeps the write slots busy while it
#: lasts, and a small job's creates wait behind at most one batch of a large one's.
MAX_CREATE_BATCH: Final = 32


class Counter(Protocol):
    def inc(self) -> None: ...


@dataclass(frozen=True)
class ChildKind:
    """What differs between writing pods and writing services."""

    #: "pod" or "service": in events, refusals and the collection delete's resource.
    noun: str
    create: Callable[[str, Mapping[str, Any]], Awaitable[bool]]
    delete: Callable[[str, str, str], Awaitable[bool]]
    created: Counter
    deleted: Counter | None = None

    @property
    def plural(self) -> str:
        return f"{self.noun}s"


@dataclass
class Pending:
    """One kind's writes that the watch cache has not shown yet: names created, with the
    monotonic time of the create (the cache may never show a pod that was deleted right
    after, so an expectation lapses), and uids deleted."""

    created: dict[str, float] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Children:
    """One kind's part of a decision: the writes, what is pending, and the names of the
    job's children the watch cache shows."""

    kind: ChildKind
    creates: Sequence[Creation]
    deletions: Sequence[Deletion]
    pending: Pending
    seen: Collection[str]

    @property
    def known(self) -> set[str]:
        """The names the operator knows of, which a collection delete must keep unless it
        deletes them: those the cache shows and those created that it does not show yet."""
        return {*self.seen, *self.pending.created}


class Host(Protocol):
    """What the writes need of the controller, for one job."""

    def record(self, event: Event) -> None: ...
    def accepted(self, noun: str, name: str) -> None: ...
    def refused(self, noun: str, child: Mapping[str, Any], error: ApiError) -> None: ...
    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...
    def decide_again(self) -> None: ...
    def monotonic(self) -> float: ...
    async def delete_collection(
        self, plural: str, keep: Collection[str]
    ) -> list[tuple[str, str]]: ...


class ChildWrites:
    """Applies one decision's creates and deletes of one job's children."""

    def __init__(self, job: JobRef, host: Host) -> None:
        self.job = job
        self.namespace = job.namespace
        self.host = host
        #: (reason, message template) -> the children the action touched, not yet reported.
        self._done: dict[tuple[str, str], list[str]] = defaultdict(list)

    async def apply(self, kinds: Sequence[Children]) -> None:
        """Every kind's deletes, concurrently, beside the creates in batches; the first
        error is raised once all have run. Deletes start in the order of `kinds`; within a
        replica's batch, creates in the reverse order: the controller passes pods, then
        services, so that a replica's service is sent before its pod."""
        calls: list[Awaitable[None]] = []
        for children in kinds:
            children.pending.deleted.update(d.uid for d in children.deletions)
            together = [d for d in children.deletions if d.collectable]
            if (
                len(together) < 2
                or len(children.known) - len(together) > MAX_KEPT_IN_COLLECTION_DELETE
            ):
                together = []
            else:
                self.host.spawn(self._clean_up(children, together))
            calls += [self._delete(children, d) for d in children.deletions if d not in together]
        calls.append(self._create_in_batches(kinds))
        results = await asyncio.gather(*calls, return_exceptions=True)
        self._report()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _create_in_batches(self, kinds: Sequence[Children]) -> None:
        """Slow start: batches of 1, 2, 4, ... replicas, at most MAX_CREATE_BATCH, each
        sent once the one before has been answered in full; none after a batch in which a
        create failed (raised) or was refused."""
        # A replica's pod and service share its name. The replicas go in the order of the
        # first kind's creates (the pods'), then those that create only a later kind.
        replicas: dict[str, list[tuple[Children, Creation]]] = {}
        for children in kinds:
            for creation in children.creates:
                replicas.setdefault(creation.name, []).insert(0, (children, creation))
        pending = list(replicas.values())
        size = 1
        while pending:
            batch, pending = pending[:size], pending[size:]
            sent = await asyncio.gather(
                *(
                    self._create(children, creation)
                    for each in batch
                    for children, creation in each
                ),
                return_exceptions=True,
            )
            errors = [r for r in sent if isinstance(r, BaseException)]
            if errors:
                raise errors[0]
            if not all(sent):
                return
            size = min(2 * size, MAX_CREATE_BATCH)

    async def _create(self, children: Children, creation: Creation) -> bool:
        """Sends one create, its body rendered now; False if it was refused or the
        namespace is going (no more creates for the job then)."""
        kind = children.kind
        name = creation.name
        child = creation.render()
        try:
            created = await kind.create(self.namespace, child)
        except ApiError as error:
            if error.namespace_terminating:
                # As Kubernetes' own controllers do: not a failure, and no retry. The
                # namespace's deletion removes the job, which ends its worker.
                logger.debug("not creating %s %s/%s: %s", kind.noun, self.namespace, name, error)
                return False
            if not error.refused:
                self.host.record(Event(WARNING, f"FailedCreate{kind.noun.title()}", str(error)))
                raise
            self.host.refused(kind.noun, child, error)
            return False
        self.host.accepted(kind.noun, name)
        children.pending.created[name] = self.host.monotonic()
        if created:
            kind.created.inc()
            self._done[
                (f"SuccessfulCreate{kind.noun.title()}", f"Created {kind.plural} {{}}")
            ].append(name)
        return True

    async def _delete(self, children: Children, deletion: Deletion) -> None:
        try:
            if await children.kind.delete(self.namespace, deletion.name, deletion.uid):
                self._deleted(children.kind, deletion.name, deletion.why)
        except Exception:
            # Not in flight any more: the next decision deletes it again.
            children.pending.deleted.discard(deletion.uid)
            raise

    async def _delete_together(self, children: Children, deletions: Sequence[Deletion]) -> None:
        kind = children.kind
        keep = children.known - {d.name for d in deletions}
        try:
            gone = await self.host.delete_collection(kind.plural, keep)
        except ApiError as error:
            if error.status not in (403, 405):
                children.pending.deleted.difference_update(d.uid for d in deletions)
                raise
            # An API server or a role without deletecollection: one by one, then.
            logger.debug("collection delete of %s refused (%s)", kind.plural, error)
            await asyncio.gather(*(self._delete(children, d) for d in deletions))
        else:
            for name, uid in gone:
                children.pending.deleted.add(uid)
                self._deleted(kind, name, deletions[0].why)
        self._report()

    async def _clean_up(self, children: Children, deletions: Sequence[Deletion]) -> None:
        """A finished job's clean-up, run beside the job's worker: it waits behind other
        jobs' decisions and must not hold a reconcile slot meanwhile."""
        try:
            await self._delete_together(children, deletions)
        except Exception as error:
            wait = jittered(CLEANUP_RETRY_SECONDS)
            logger.warning(
                "clean-up of %s of tfjob %s/%s failed (%s); retrying in %.0fs",
                children.kind.plural,
                self.namespace,
                self.job.name,
                error,
                wait,
            )
            await asyncio.sleep(wait)
            self.host.decide_again()

    def _deleted(self, kind: ChildKind, name: str, why: str) -> None:
        if kind.deleted is not None:
            kind.deleted.inc()
        self._done[
            (f"SuccessfulDelete{kind.noun.title()}", f"Deleted {kind.plural} {{}}: {why}")
        ].append(name)

    def _report(self) -> None:
        """One event per kind of action done so far, naming every child it touched."""
        for (reason, template), names in self._done.items():
            self.host.record(Event(NORMAL, reason, template.format(", ".join(sorted(names)))))
        self._done.clear()
