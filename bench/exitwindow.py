"""What the exits cost the machine: from just before the first leader exit until the
harness sees every TFJob Succeeded, the same window in both phases.

exit→Succeeded is mostly waiting, and the wait can be the storage's work or a queue for the
cores. Two readings over the window tell them apart: the API server's own time for each
etcd update of pods and TFJobs (etcd_request_duration_seconds, from its metrics before and
after the window) and the CPU every process used (/proc), against the cores the machine
has. Both metrics readings are taken outside the window's critical path: the first before
the first exit, the second after the last Succeeded is seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench import promtext
from bench.apiclient import ApiClient
from bench.procstats import cpu_by_name, cpu_delta, machine_busy_seconds, own_cpu_seconds

#: The updates whose storage latency the window reports: the leaders' exits and the
#: controller's status writes.
UPDATED = ("pods", "tfjobs")


@dataclass
class ExitWindow:
    """Readings at the window's start; `close` turns them into the window's figures."""

    pids: Mapping[str, int]
    metrics: str
    began: float = field(default_factory=time.monotonic)
    machine: float = field(default_factory=machine_busy_seconds)
    harness: float = field(default_factory=own_cpu_seconds)
    processes: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.processes = cpu_by_name(dict(self.pids))

    @classmethod
    async def open(cls, client: ApiClient, pids: Mapping[str, int]) -> ExitWindow:
        """`pids`: the processes to account for by name (control plane, kwok, operator)."""
        return cls(pids, await client.text("/metrics"))

    async def close(self, client: ApiClient) -> dict[str, Any]:
        wall = time.monotonic() - self.began
        machine = machine_busy_seconds() - self.machine
        processes = cpu_delta(self.processes, cpu_by_name(dict(self.pids)))
        harness = own_cpu_seconds() - self.harness
        updates = storage_update_seconds(self.metrics, await client.text("/metrics"))
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
        }


def storage_update_seconds(before: str, after: str) -> dict[str, tuple[float, int]]:
    """Resource -> (seconds, count) of the etcd updates between two metrics readings, for
    the resources in UPDATED that were updated at all."""
    start, end = promtext.storage_updates(before), promtext.storage_updates(after)
    found = {}
    for resource in UPDATED:
        seconds, count = end.get(resource, (0.0, 0))
        seconds_before, count_before = start.get(resource, (0.0, 0))
        if count > count_before:
            found[resource] = (seconds - seconds_before, count - count_before)
    return found
