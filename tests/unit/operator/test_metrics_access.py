"""/metrics behind the API server's authentication and authorization (metrics_access.py),
served over HTTPS with a self-signed certificate by the operator's endpoints: the reviews
are faked, the server and the TLS are real (aiohttp on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from support.scrape import scrape

from tfjob_localcluster.host.ports import free_port
from tfjob_operator.endpoints import Endpoints
from tfjob_operator.metrics import Metrics
from tfjob_operator.metrics_access import (
    ACCESS_REVIEWS,
    ALLOWED_TTL_SECONDS,
    MAX_REMEMBERED,
    TOKEN_REVIEWS,
    MetricsGuard,
    serving_context,
)

#: Tokens the fake API server knows, and whether each may get /metrics.
USERS = {"reader-token": ("system:serviceaccount:monitoring:prometheus", True),
         "tenant-token": ("alice", False)}  # fmt: skip


class FakeApiServer:
    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.down = False

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        review = json.loads(body)
        self.posts.append((path, review))
        if self.down:
            raise OSError("connection refused")
        if path == TOKEN_REVIEWS:
            user = USERS.get(review["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                status["user"] = {"username": user[0], "groups": ["system:authenticated"]}
            return 201, json.dumps({"status": status}).encode()
        assert path == ACCESS_REVIEWS
        assert review["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        allowed = any(u == review["spec"]["user"] and ok for u, ok in USERS.values())
        return 201, json.dumps({"status": {"allowed": allowed}}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def check(guard: MetricsGuard, authorization: str | None) -> int:
    return asyncio.run(guard.check(authorization)).status


def test_a_reader_is_served_a_tenant_is_forbidden_and_no_token_is_unauthorized() -> None:
    api = FakeApiServer()
    guard = MetricsGuard(api.post)
    assert check(guard, None) == 401
    assert check(guard, "Basic dXNlcjpwYXNz") == 401
    assert check(guard, "Bearer forged") == 401
    assert check(guard, "Bearer tenant-token") == 403
    assert check(guard, "Bearer reader-token") == 200
    assert [path for path, _ in api.posts].count(ACCESS_REVIEWS) == 2, "forged: no access review"


def test_answers_are_remembered_for_a_while_and_not_when_the_api_server_failed() -> None:
    api, clock = FakeApiServer(), Clock()
    guard = MetricsGuard(api.post, clock)
    api.down = True
    assert check(guard, "Bearer reader-token") == 503
    api.down = False
    assert check(guard, "Bearer reader-token") == 200, "a failed review is asked again"
    asked = len(api.posts)
    clock.now += ALLOWED_TTL_SECONDS - 1
    assert check(guard, "Bearer reader-token") == 200
    assert len(api.posts) == asked, "remembered"
    clock.now += 2
    assert check(guard, "Bearer reader-token") == 200
    assert len(api.posts) == asked + 2, "asked again once the answer lapsed"


def test_no_caller_makes_the_operator_remember_more_than_its_bound() -> None:
    guard = MetricsGuard(FakeApiServer().post)
    for i in range(MAX_REMEMBERED + 50):
        assert check(guard, f"Bearer forged-{i}") == 401
    assert len(guard._remembered) == MAX_REMEMBERED


def test_the_endpoints_serve_metrics_over_tls_to_readers_and_probes_in_plain_http() -> None:
    async def scenario() -> list[tuple[int, str]]:
        metrics = Metrics()
        metrics.reconcile_errors.inc()
        endpoints = Endpoints(metrics, ready=lambda: True, guard=MetricsGuard(FakeApiServer().post))
        health, metrics_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        await endpoints.start(health, metrics_port, serving_context(None))
        try:
            base = f"https://127.0.0.1:{metrics_port}/metrics"
            return [
                await asyncio.to_thread(scrape, base, "reader-token"),
                await asyncio.to_thread(scrape, base, "tenant-token"),
                await asyncio.to_thread(scrape, base, None),
                await asyncio.to_thread(scrape, f"http://127.0.0.1:{health}/readyz", None),
            ]
        finally:
            await endpoints.stop()

    served, forbidden, anonymous, ready = asyncio.run(scenario())
    assert served[0] == 200
    assert "tfjob_operator_reconcile_errors_total 1.0" in served[1]
    assert forbidden == (403, "alice may not get /metrics\n")
    assert anonymous == (401, "a bearer token is required\n")
    assert ready == (200, "ok\n")
