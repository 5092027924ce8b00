"""The order in which the operator's writes reach the API server.

The API server is an aiohttp server on a local port that holds every request until the
test lets it through, so the real HTTP client code runs and the order is the server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from support.api_clients import client_of

from tfjob_operator.api import JobRef
from tfjob_operator.apiserver.aio import unavailable
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.kube import Kube
from tfjob_operator.metrics import Metrics

Scenario = Callable[[Kube, "HoldingServer"], Awaitable[None]]


class HoldingServer:
    """Answers each request once `release` is set; `arrived` lists them as they come."""

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.release = asyncio.Event()
        self._arrival = asyncio.Condition()

    async def handle(self, request: web.Request) -> web.Response:
        async with self._arrival:
            self.arrived.append(f"{request.method} {request.path.rsplit('/', 1)[-1]}")
            self._arrival.notify_all()
        await self.release.wait()
        body: dict[str, Any] = {"metadata": {"name": "x", "uid": "u", "resourceVersion": "2"}}
        if request.method == "DELETE":
            body = {"items": []}
        return web.json_response(body, status=201 if request.method == "POST" else 200)

    async def until_arrived(self, count: int) -> None:
        async with self._arrival:
            await self._arrival.wait_for(lambda: len(self.arrived) >= count)


def run(scenario: Scenario, max_in_flight: int, metrics: Metrics | None = None) -> HoldingServer:
    server = HoldingServer()

    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server.handle)
        async with TestServer(app) as test_server:
            api = client_of(test_server, max_in_flight=max_in_flight, metrics=metrics)
            try:
                await asyncio.wait_for(scenario(Kube(api), server), 10)
            finally:
                await api.close()

    asyncio.run(main())
    return server


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def test_queued_writes_go_decisions_first_then_children_then_progress_then_events() -> None:
    async def scenario(kube: Kube, server: HoldingServer) -> None:
        first = asyncio.create_task(kube.create_pod("ml", pod("first")))
        await server.until_arrived(1)  # the only slot is taken: the rest queue
        queued = [
            kube.create_event("ml", {"reason": "event"}),
            kube.patch_status(JobRef("ml", "progress", "u1"), "1", {}, decision=False),
            kube.create_pod("ml", pod("child")),
            kube.patch_status(JobRef("ml", "decision", "u2"), "1", {}, decision=True),
        ]
        tasks = [asyncio.create_task(call) for call in queued]
        await asyncio.sleep(0.1)
        server.release.set()
        await asyncio.gather(first, *tasks)

    server = run(scenario, max_in_flight=1)
    assert server.arrived == [
        "POST pods",
        "PATCH status",  # the decision
        "POST pods",
        "PATCH status",  # progress
        "POST events",
    ]


def test_clean_up_and_events_wait_while_a_decision_is_in_flight() -> None:
    async def scenario(kube: Kube, server: HoldingServer) -> None:
        decision = asyncio.create_task(
            kube.patch_status(JobRef("ml", "job", "u1"), "1", {}, decision=True)
        )
        await server.until_arrived(1)
        background = [
            asyncio.create_task(kube.delete_collection("ml", "pods", "uid", keep=())),
            asyncio.create_task(kube.create_event("ml", {"reason": "event"})),
        ]
        child = asyncio.create_task(kube.create_pod("ml", pod("child")))
        await server.until_arrived(2)
        await asyncio.sleep(0.2)
        # Free slots, yet only the child went: the background waits for the decision.
        assert server.arrived == ["PATCH status", "POST pods"]
        server.release.set()
        await asyncio.gather(decision, child, *background)

    server = run(scenario, max_in_flight=8)
    assert sorted(server.arrived[2:]) == ["DELETE pods", "POST events"]


def test_each_write_records_its_wait_for_a_slot_and_its_time_in_flight_by_priority() -> None:
    metrics = Metrics()

    async def scenario(kube: Kube, server: HoldingServer) -> None:
        child = asyncio.create_task(kube.create_pod("ml", pod("child")))
        await server.until_arrived(1)  # the only slot is taken: the decision waits for it
        decision = asyncio.create_task(
            kube.patch_status(JobRef("ml", "job", "u1"), "1", {}, decision=True)
        )
        await asyncio.sleep(0.2)
        server.release.set()
        await asyncio.gather(child, decision)

    run(scenario, max_in_flight=1, metrics=metrics)

    def sample(name: str, priority: str) -> float:
        value = metrics.registry.get_sample_value(name, {"priority": priority})
        assert value is not None, f"{name}{{priority={priority}}} was not observed"
        return value

    # The child held the slot while the server held it; the decision waited that long for
    # the slot and was answered at once.
    assert sample("tfjob_operator_write_wait_seconds_count", "decision") == 1
    assert sample("tfjob_operator_write_wait_seconds_sum", "decision") >= 0.2
    assert sample("tfjob_operator_write_duration_seconds_sum", "decision") < 0.2
    assert sample("tfjob_operator_write_wait_seconds_sum", "child") < 0.2
    assert sample("tfjob_operator_write_duration_seconds_sum", "child") >= 0.2


def test_an_api_server_down_or_restarting_is_unavailable_a_refusal_is_not() -> None:
    assert unavailable(ApiError(503, "get pods", b'{"message": "etcd unavailable"}'))
    assert unavailable(ApiError(429, "get pods", b'{"message": "too many requests"}'))
    assert unavailable(ConnectionRefusedError(111, "Connection refused"))
    assert unavailable(aiohttp.ServerDisconnectedError())
    assert not unavailable(ApiError(403, "create pod", b'{"message": "forbidden"}'))
    assert not unavailable(ApiError(422, "create pod", b'{"message": "invalid"}'))
    assert not unavailable(KeyError("spec"))


def test_a_refusal_is_a_client_error_other_than_a_conflict_or_a_throttle() -> None:
    invalid = ApiError(422, "create pod", b'{"reason": "Invalid", "message": "spec: bad"}')
    assert invalid.refused
    assert (invalid.reason, invalid.detail) == ("Invalid", "spec: bad")
    assert ApiError(403, "create pod", b'{"reason": "Forbidden", "message": "quota"}').refused
    assert ApiError(404, "create pod", b"404 page not found").refused
    for status in (409, 429, 500, 503):
        assert not ApiError(status, "create pod", b"{}").refused
