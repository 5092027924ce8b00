"""The floor's controller: a TFJob is marked Succeeded as soon as its leader's exit is seen.

It decides nothing else, renders nothing, keeps no queue: one watch of the pods and one
status patch per job, sent the moment the event arrives. Its exit→Succeeded is what the
API server and the watches cost on this machine: a lower bound of the operator's figure.

It runs as a process of its own (`python -m bench.responder`), as the operator does: the
floor then pays the same hop between processes, the harness does the same work in both
phases, and the window reads the responder's CPU apart from the harness's. It runs until
it is terminated; a failed write ends it with status 1 and the error on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.watching import watching
from harness.apiclient import SYNCED, ApiClient, Obj, reply_message
from tfjob_operator import timeutil
from tfjob_operator.api import ConditionType
from tfjob_operator.apiserver import MERGE_PATCH
from tfjob_operator.conditions import set_condition


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


#: How often the program looks for a failed write or a stopped watch.
CHECK_SECONDS = 0.2


async def serve(
    kubeconfig: Path, jobs_path: str, pods_path: str, leaders: Mapping[str, str], writes: int
) -> str:
    """Responds to the leaders' exits until a write fails, and returns that failure; a watch
    that stops raises its error instead.

    `writes` is how many status writes may be in flight; the watch holds one more
    connection."""
    async with ApiClient(kubeconfig, connections=writes + 1) as client:
        responder = Responder(client, jobs_path, leaders)
        async with watching(client, {pods_path: responder.on_pod}) as check:
            while not responder.failures:
                check()
                await asyncio.sleep(CHECK_SECONDS)
    return responder.failures[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.responder", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--jobs-path", required=True, help="the TFJobs' collection path")
    parser.add_argument("--pods-path", required=True, help="the pods' collection path")
    parser.add_argument(
        "--leaders", type=Path, required=True, help="JSON file: leader pod name -> job name"
    )
    parser.add_argument("--writes", type=int, default=32, help="status writes in flight at most")
    args = parser.parse_args(argv)
    leaders = json.loads(args.leaders.read_text())
    failure = asyncio.run(
        serve(args.kubeconfig, args.jobs_path, args.pods_path, leaders, args.writes)
    )
    print(f"responder: {failure}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
