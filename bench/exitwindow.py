"""What the exits cost the machine: from just before the first leader exit until the
harness sees every TFJob Succeeded, the same window in both phases.

exit→Succeeded is mostly waiting, and the wait can be the storage's work or a queue for the
cores. Two readings over the window tell them apart: the API server's own time for each
etcd update of pods and TFJobs (etcd_request_duration_seconds, from its metrics before and
after the window) and the CPU every process used (/proc), against the cores the machine
has. Both metrics readings are taken outside the window's critical path: the first before
the first exit, the second after the last Succeeded is seen. The API server records an
update's etcd time when etcd answers it, which can be after the update's watch event has
reached the harness; so the second reading is taken again, briefly, until it counts at
least the updates the harness saw. This repository's operator is
read the same way, for where its decisions waited: for their reconcile, for a write slot,
and for the API server's answer.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.procstats import cpu_by_name, cpu_delta, machine_busy_seconds, own_cpu_seconds
from harness import promtext
from tfjob_operator.apiserver.aio import Priority


class MetricsReader(Protocol):
    """Where the API server's metrics are read (the harness's ApiClient)."""

    async def text(self, path: str) -> str: ...


#: Reads the operator's own metrics (None if it serves none, as another project's may not).
OperatorMetrics = Callable[[], str | None]

#: The updates whose storage latency the window reports: the leaders' exits and the
#: controller's status writes.
UPDATED = ("pods", "tfjobs")
#: How long the closing reading waits for the API server to count the updates the harness
#: saw; past it, the reading is reported as it is.
COUNTED_WITHIN_SECONDS = 5.0
#: The interval between two closing readings.
RECOUNT_SECONDS = 0.05
#: The operator's decision writes, as its write metrics label them.
DECISION = Priority.DECISION.label


@dataclass
class ExitWindow:
    """Readings at the window's start; `close` turns them into the window's figures."""

    pids: Mapping[str, int]
    metrics: str
    operator: OperatorMetrics | None = None
    operator_metrics: str | None = None
    began: float = field(default_factory=time.monotonic)
    machine: float = field(default_factory=machine_busy_seconds)
    harness: float = field(default_factory=own_cpu_seconds)
    processes: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.processes = cpu_by_name(dict(self.pids))

    @classmethod
    async def open(
        cls, client: MetricsReader, pids: Mapping[str, int], operator: OperatorMetrics | None = None
    ) -> ExitWindow:
        """`pids`: the processes to account for by name (control plane, kwok, operator);
        `operator` reads the operator's metrics, if it is this repository's."""
        operator_metrics = await asyncio.to_thread(operator) if operator is not None else None
        return cls(pids, await client.text("/metrics"), operator, operator_metrics)

    async def close(self, client: MetricsReader, seen: Mapping[str, int]) -> dict[str, Any]:
        """`seen`: resource -> how many of its updates in the window the harness saw (each
        job's Succeeded is one of the TFJob's)."""
        wall = time.monotonic() - self.began
        machine = machine_busy_seconds() - self.machine
        processes = cpu_delta(self.processes, cpu_by_name(dict(self.pids)))
        harness = own_cpu_seconds() - self.harness
        updates = await self._updates_counting(client, seen)
        waits: dict[str, float | int] = {}
        if self.operator is not None and self.operator_metrics is not None:
            after = await asyncio.to_thread(self.operator)
            if after is not None:
                waits = operator_waits(self.operator_metrics, after)
        return {
            "wall_seconds": round(wall, 3),
            "busy_cores": round(machine / wall, 2) if wall > 0 else None,
            "cores": os.cpu_count(),
            "cpu_seconds": {**processes, "harness": round(harness, 2)},
            "storage_update_ms": {
                resource: round(seconds / count * 1000, 1)
                for resource, (seconds, count) in updates.items()
            },
            "storage_updates": {resource: count for resource, (_, count) in updates.items()},
            **({"operator_ms": waits} if waits else {}),
        }

    async def _updates_counting(
        self, client: MetricsReader, seen: Mapping[str, int]
    ) -> dict[str, tuple[float, int]]:
        deadline = time.monotonic() + COUNTED_WITHIN_SECONDS
        while True:
            updates = storage_update_seconds(self.metrics, await client.text("/metrics"))
            if counts_all(updates, seen) or time.monotonic() >= deadline:
                return updates
            await asyncio.sleep(RECOUNT_SECONDS)


def counts_all(updates: Mapping[str, tuple[float, int]], seen: Mapping[str, int]) -> bool:
    """Whether a reading counts at least the updates seen, resource by resource."""
    return all(updates.get(resource, (0.0, 0))[1] >= count for resource, count in seen.items())


def storage_update_seconds(before: str, after: str) -> dict[str, tuple[float, int]]:
    """Resource -> (seconds, count) of the etcd updates between two metrics readings, for
    the resources in UPDATED that were updated at all."""
    updates = promtext.histogram_delta(
        before, after, "etcd_request_duration_seconds", "resource", {"operation": "update"}
    )
    return {resource: updates[resource] for resource in UPDATED if resource in updates}


def operator_waits(before: str, after: str) -> dict[str, float | int]:
    """Where the operator's decisions spent the window, from its own metrics read before and
    after, in mean milliseconds: waiting for their reconcile to start (`queue_wait_ms`), for
    a write slot (`decision_write_wait_ms`), and in flight until the API server answered
    (`decision_write_ms`); `decision_writes` counts the writes. A figure the operator did
    not observe in the window is left out."""
    readings = {
        "queue_wait_ms": promtext.histogram_delta(
            before, after, "tfjob_operator_queue_wait_seconds"
        ).get(""),
        "decision_write_wait_ms": promtext.histogram_delta(
            before, after, "tfjob_operator_write_wait_seconds", "priority"
        ).get(DECISION),
        "decision_write_ms": promtext.histogram_delta(
            before, after, "tfjob_operator_write_duration_seconds", "priority"
        ).get(DECISION),
    }
    found: dict[str, float | int] = {}
    for name, reading in readings.items():
        if reading is not None:
            seconds, count = reading
            found[name] = round(seconds / count * 1000, 1)
    written = readings["decision_write_ms"]
    if written is not None:
        found["decision_writes"] = written[1]
    return found
