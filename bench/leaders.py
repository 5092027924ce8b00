"""Ending the jobs' leaders: the driver writes each leader pod's exit as a kubelet would.

Both phases end their leaders this way, so that exit→Succeeded is the same measure in each:
from the API server's answer to the exit (its audit log) to the harness's watch seeing the
TFJob's Succeeded condition.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from bench.cluster import NAMESPACE
from bench.progress import Progress
from bench.shape import leader_exit_patch
from harness.apiclient import ApiClient, bounded
from tfjob_operator import timeutil
from tfjob_operator.apiserver import MERGE_PATCH


async def end_leaders(
    driver: ApiClient, progress: Progress, leaders: Iterable[str], concurrency: int
) -> float:
    """Patches every leader pod to Succeeded (exit code 0), `concurrency` at a time;
    returns when the first was sent (harness clock)."""

    def end(name: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            finished = timeutil.to_rfc3339(timeutil.now())
            await driver.request(
                "PATCH",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
                leader_exit_patch(progress.leader_pods[name], finished),
                content_type=MERGE_PATCH,
            )

        return call

    began = time.time()
    await bounded(concurrency, [end(name) for name in leaders])
    return began
