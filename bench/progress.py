"""What the harness's watches have shown: the jobs' children, their phases, the jobs' states.

Watch events feed the handlers; a phase waits for a condition (every pod created, every pod
Running, every job Succeeded) with `wait_until`. Only the expected children count: names
`<job>-<type>-<index>` of the jobs this run created.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.shape import job_of_child
from harness.apiclient import SYNCED

Obj = dict[str, Any]


class WaitTimeout(RuntimeError):
    pass


class JobFailed(RuntimeError):
    pass


@dataclass
class Progress:
    """Children and job states, updated by watch handlers (harness clock: `time.time()`)."""

    expected_children: set[str]
    leaders: set[str]
    pods_created: set[str] = field(default_factory=set)
    services_created: set[str] = field(default_factory=set)
    pods_present: set[str] = field(default_factory=set)
    pods_running: set[str] = field(default_factory=set)
    #: The latest object of each leader pod: its exit is patched onto it.
    leader_pods: dict[str, Obj] = field(default_factory=dict)
    #: Job name -> when its Succeeded condition was first seen.
    succeeded: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def expecting(cls, children: Iterable[str], leaders: Iterable[str]) -> Progress:
        return cls(expected_children=set(children), leaders=set(leaders))

    # --- watch handlers ------------------------------------------------------------------

    def on_pod(self, kind: str, pod: Obj) -> None:
        if kind == SYNCED:
            listed = {item["metadata"]["name"] for item in pod.get("items") or []}
            self.pods_present &= listed
            self.pods_running &= listed
            self.leader_pods = {k: v for k, v in self.leader_pods.items() if k in listed}
            self._changed.set()
            return
        name = pod["metadata"]["name"]
        if name not in self.expected_children:
            return
        self.pods_created.add(name)
        if kind == "DELETED":
            self.pods_present.discard(name)
            self.pods_running.discard(name)
            self.leader_pods.pop(name, None)
        else:
            self.pods_present.add(name)
            if (pod.get("status") or {}).get("phase") == "Running":
                self.pods_running.add(name)
            else:
                self.pods_running.discard(name)
            if name in self.leaders:
                self.leader_pods[name] = pod
        self._changed.set()

    def on_service(self, kind: str, service: Obj) -> None:
        if kind == SYNCED:
            return
        name = service["metadata"]["name"]
        if name in self.expected_children:
            self.services_created.add(name)
            self._changed.set()

    def on_job(self, kind: str, job: Obj) -> None:
        if kind == SYNCED:
            return
        name = job["metadata"]["name"]
        if kind == "DELETED" or name in self.succeeded:
            return
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Succeeded":
                self.succeeded[name] = time.time()
                self._changed.set()
            elif condition.get("type") == "Failed":
                self.failed[name] = condition.get("message") or condition.get("reason") or ""
                self._changed.set()

    # --- conditions ----------------------------------------------------------------------

    def all_created(self) -> bool:
        return len(self.pods_created) == len(self.services_created) == len(self.expected_children)

    def all_running(self) -> bool:
        return len(self.pods_running) == len(self.expected_children)

    def all_succeeded(self) -> bool:
        return len(self.succeeded) == len(self.leaders)

    def only_leaders_left(self) -> bool:
        """Every pod but the succeeded leaders deleted (cleanPodPolicy Running)."""
        return self.pods_present <= self.leaders

    def describe(self) -> str:
        expected = len(self.expected_children)
        jobs_of_pods = {job_of_child(name) for name in self.pods_created}
        return (
            f"pods created {len(self.pods_created)}/{expected} (for {len(jobs_of_pods)} jobs), "
            f"services created {len(self.services_created)}/{expected}, "
            f"pods running {len(self.pods_running)}/{expected}, "
            f"pods present {len(self.pods_present)}, "
            f"jobs succeeded {len(self.succeeded)}/{len(self.leaders)}, "
            f"jobs failed {len(self.failed)}"
        )

    async def wait_until(
        self,
        condition: Callable[[], bool],
        what: str,
        within: float,
        check: Callable[[], None] = lambda: None,
    ) -> float:
        """Waits until `condition()`; returns the harness time it became true.

        `check` runs at least once a second and may raise (an operator that exited); a job
        that failed ends the wait at once, since this benchmark's jobs must all succeed.
        """
        deadline = time.monotonic() + within
        while not condition():
            if self.failed:
                name, message = next(iter(self.failed.items()))
                raise JobFailed(f"TFJob {name} failed while waiting for {what}: {message}")
            check()
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"{what}: not reached in {within:.0f}s; {self.describe()}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
        return time.time()
