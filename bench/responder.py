"""The floor's controller: a TFJob is marked Succeeded as soon as its leader's exit is seen.

It decides nothing else, renders nothing, keeps no queue: one watch of the pods and one
status patch per job, sent the moment the event arrives. Its exit→Succeeded is what the
API server and the watches cost on this machine: a lower bound of the operator's figure,
lower still because it runs inside the harness (no hop between processes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from bench.apiclient import SYNCED, ApiClient, Obj, reply_message
from tfjob_operator import timeutil
from tfjob_operator.api import ConditionType
from tfjob_operator.conditions import set_condition
from tfjob_operator.kube import MERGE_PATCH


class Responder:
    """Watch handler for pods; marks the job of each leader that exited 0 Succeeded."""

    def __init__(self, client: ApiClient, jobs_path: str, leaders: Mapping[str, str]) -> None:
        self.client = client
        self.jobs_path = jobs_path
        #: Leader pod name -> its job's name.
        self.leaders = dict(leaders)
        self.marked: set[str] = set()
        self.failures: list[str] = []
        self._writes: set[asyncio.Task[None]] = set()

    def on_pod(self, kind: str, pod: Obj) -> None:
        if kind in (SYNCED, "DELETED"):
            return
        job = self.leaders.get(pod["metadata"]["name"])
        if job is None or job in self.marked:
            return
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            return
        self.marked.add(job)
        write = asyncio.get_running_loop().create_task(self._mark(job))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _mark(self, job: str) -> None:
        conditions = set_condition(
            [],
            ConditionType.SUCCEEDED,
            True,
            "TFJobSucceeded",
            f"TFJob {job} successfully completed.",
            timeutil.to_rfc3339(timeutil.now()),
        )
        status, reply = await self.client.send(
            "PATCH",
            f"{self.jobs_path}/{job}/status",
            {"status": {"conditions": conditions}},
            content_type=MERGE_PATCH,
        )
        if not 200 <= status < 300:
            message = reply_message(reply)
            self.failures.append(f"PATCH {job}/status: {status} {message}")
