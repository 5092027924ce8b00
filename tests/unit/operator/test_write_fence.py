"""Writes fenced by the leader's renew deadline, and the API server's `Retry-After`.

The API server is an aiohttp server on a local port, so the real HTTP client runs: a
write is not sent once the fence has closed, one in flight is abandoned when it closes or
when leadership is lost, a retry checks the fence again, and a 429 is tried again no
sooner than its `Retry-After`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from support.api_clients import client_of

from tfjob_operator.apiserver.aio import ApiServerClient, NotLeading, raise_for
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.backoff import MAX_RETRY_AFTER_SECONDS, retry_after_header, retry_delay

POD = "/api/v1/namespaces/ml/pods"
THROTTLED = (
    b'{"kind":"Status","status":"Failure","reason":"TooManyRequests","code":429,'
    b'"message":"Too many requests, please try again later.",'
    b'"details":{"retryAfterSeconds":1}}'
)


class ApiServer:
    """Answers as `answers` says, one per request (the last repeats); `hold` delays each
    answer; `arrived` records when each request came (monotonic)."""

    def __init__(self, answers: list[tuple[int, dict[str, str]]], hold: float = 0.0) -> None:
        self.answers = answers
        self.hold = hold
        self.arrived: list[float] = []
        self.answered = 0
        self._arrival: asyncio.Condition | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.arrived.append(time.monotonic())
        async with self._condition():
            self._condition().notify_all()
        status, headers = self.answers[min(len(self.arrived), len(self.answers)) - 1]
        await asyncio.sleep(self.hold)
        self.answered += 1
        body = THROTTLED if status == 429 else b'{"metadata":{"name":"p"}}'
        return web.Response(
            status=status, body=body, headers=headers, content_type="application/json"
        )

    async def until_arrived(self, count: int) -> None:
        async with self._condition():
            await self._condition().wait_for(lambda: len(self.arrived) >= count)

    def _condition(self) -> asyncio.Condition:
        if self._arrival is None:
            self._arrival = asyncio.Condition()
        return self._arrival


def run(server: ApiServer, scenario: Callable[[ApiServerClient], Awaitable[None]]) -> None:
    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server.handle)
        async with TestServer(app) as test_server:
            api = client_of(test_server)
            try:
                await asyncio.wait_for(scenario(api), 10)
            finally:
                await api.close()

    asyncio.run(main())


def test_a_write_is_not_sent_once_the_fence_has_closed() -> None:
    server = ApiServer([(201, {})])

    async def scenario(api: ApiServerClient) -> None:
        api.fence = lambda: time.monotonic() - 0.001
        with pytest.raises(NotLeading, match="does not lead"):
            await api.send("POST", POD, body={"metadata": {"name": "p"}})

    run(server, scenario)
    assert server.arrived == []


def test_a_write_in_flight_is_abandoned_when_the_renew_deadline_passes() -> None:
    server = ApiServer([(201, {})], hold=5.0)

    async def scenario(api: ApiServerClient) -> None:
        deadline = time.monotonic() + 0.3
        api.fence = lambda: deadline
        began = time.monotonic()
        with pytest.raises(NotLeading, match="abandoned"):
            await api.send("POST", POD, body={"metadata": {"name": "p"}})
        assert time.monotonic() - began == pytest.approx(0.3, abs=0.2)

    run(server, scenario)
    assert len(server.arrived) == 1
    assert server.answered == 0


def test_leadership_lost_abandons_every_write_in_flight_at_once() -> None:
    server = ApiServer([(201, {})], hold=5.0)

    async def scenario(api: ApiServerClient) -> None:
        deadline = [time.monotonic() + 8.0]
        api.fence = lambda: deadline[0]
        writes = [
            asyncio.create_task(api.send("POST", POD, body={"metadata": {"name": f"p{i}"}}))
            for i in range(3)
        ]
        await server.until_arrived(3)
        lost = time.monotonic()
        deadline[0] = -float("inf")  # as leader.Elector does when it finds the Lease lost
        api.abandon_writes()
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert time.monotonic() - lost < 0.5
        assert all(isinstance(o, NotLeading) for o in outcomes), outcomes

    run(server, scenario)
    assert server.answered == 0


def test_a_throttled_write_is_tried_again_no_sooner_than_retry_after() -> None:
    server = ApiServer([(429, {"Retry-After": "1"}), (201, {})])

    async def scenario(api: ApiServerClient) -> None:
        status, _ = await api.send("POST", POD, body={"metadata": {"name": "p"}})
        assert status == 201
        assert b"tfjob_operator_api_throttled_total 1.0" in api.metrics.exposition()

    run(server, scenario)
    first, second = server.arrived
    assert 1.0 <= second - first <= 1.5 + 0.3  # Retry-After and at most half of it in jitter


def test_a_retry_checks_the_fence_again_and_is_not_sent_once_it_closed() -> None:
    server = ApiServer([(429, {"Retry-After": "1"}), (201, {})])

    async def scenario(api: ApiServerClient) -> None:
        deadline = time.monotonic() + 0.5  # closes while the write waits to retry
        api.fence = lambda: deadline
        with pytest.raises(NotLeading):
            await api.send("POST", POD, body={"metadata": {"name": "p"}})

    run(server, scenario)
    assert len(server.arrived) == 1


def test_a_throttle_that_outlasts_the_write_is_the_callers_with_the_time_asked() -> None:
    server = ApiServer([(429, {"Retry-After": "1"})])

    async def scenario(api: ApiServerClient) -> None:
        status, payload = await api.request("POST", POD, data=b"{}", limit_seconds=0.5)
        assert status == 429
        with pytest.raises(ApiError) as refused:
            raise_for(status, "create pod ml/p", payload)
        assert refused.value.retry_after == 1.0

    run(server, scenario)
    assert len(server.arrived) == 1


def test_backoff_doubles_is_jittered_and_never_comes_before_retry_after() -> None:
    least = [retry_delay(n, 2.0, 60.0, uniform=lambda: 0.0) for n in (1, 2, 3, 10)]
    assert least == [2.0, 4.0, 8.0, 60.0]
    assert retry_delay(1, 2.0, 60.0, uniform=lambda: 1.0) == 3.0
    assert retry_delay(1, 2.0, 60.0, retry_after=7.0, uniform=lambda: 1.0) == 7.0
    asked_too_much = retry_delay(1, 2.0, 60.0, retry_after=3600.0, uniform=lambda: 0.0)
    assert asked_too_much == MAX_RETRY_AFTER_SECONDS


def test_retry_after_is_read_as_seconds() -> None:
    assert retry_after_header({"Retry-After": "2"}) == 2.0
    assert retry_after_header({}) is None
    assert retry_after_header({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None
    assert retry_after_header({"Retry-After": "-1"}) == 0.0
