"""The floor's responder marks a job Succeeded once, when its leader's exit is seen."""

from __future__ import annotations

import asyncio
from typing import Any

# The benchmark is not an installed package: it runs from the repository root.
from bench.responder import Responder
from harness.apiclient import SYNCED

JOBS = "/apis/tfjob.dev/v1/namespaces/ns/tfjobs"


class FakeClient:
    """Records what is sent; answers with `status`."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.sent: list[tuple[str, str, Any, str]] = []

    async def send(
        self, method: str, path: str, body: Any = None, *, content_type: str = ""
    ) -> tuple[int, Any]:
        self.sent.append((method, path, body, content_type))
        return self.status, {"message": "denied"} if self.status >= 400 else {}


def pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


async def feed(responder: Responder, events: list[tuple[str, dict[str, Any]]]) -> None:
    for kind, obj in events:
        responder.on_pod(kind, obj)
    # Let the writes the handler started run.
    for _ in range(5):
        await asyncio.sleep(0)


def responder_with(client: FakeClient) -> Responder:
    leaders = {"a-chief-0": "a", "b-worker-0": "b"}
    return Responder(client, JOBS, leaders)  # type: ignore[arg-type]


def test_each_job_is_marked_once_when_its_leader_succeeded() -> None:
    client = FakeClient()
    responder = responder_with(client)
    asyncio.run(
        feed(
            responder,
            [
                (SYNCED, {"items": []}),
                ("ADDED", pod("a-chief-0", "Running")),
                ("MODIFIED", pod("a-worker-0", "Succeeded")),  # not the leader
                ("MODIFIED", pod("a-chief-0", "Succeeded")),
                ("MODIFIED", pod("a-chief-0", "Succeeded")),  # seen again: no second write
                ("DELETED", pod("b-worker-0", "Succeeded")),
                ("MODIFIED", pod("b-worker-0", "Failed")),
            ],
        )
    )
    assert responder.marked == {"a"}
    ((method, path, body, content_type),) = client.sent
    assert (method, path) == ("PATCH", f"{JOBS}/a/status")
    assert content_type == "application/merge-patch+json"
    (condition,) = body["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Succeeded",
        "True",
        "TFJobSucceeded",
    )
    assert condition["lastTransitionTime"].endswith("Z")
    assert responder.failures == []


def test_a_refused_write_is_a_failure_the_floor_reports() -> None:
    client = FakeClient(status=422)
    responder = responder_with(client)
    asyncio.run(feed(responder, [("MODIFIED", pod("b-worker-0", "Succeeded"))]))
    assert responder.failures == ["PATCH b/status: 422 denied"]
