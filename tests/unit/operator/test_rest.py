"""The synchronous front (apiserver/sync.py) that the client, the local cluster, the chaos run
and the tests' helpers share, against a fake API server on the loopback: a readiness
probe, a create-or-replace that loses to another writer, a body that is not JSON, and a
watch's events up to its expiry."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tfjob_operator.apiserver.errors import ApiError, WatchExpired
from tfjob_operator.apiserver.sync import Rest

Answer = tuple[int, str, bytes]


class FakeApiServer:
    """Answers each request from `answers` ("METHOD path" -> a list of answers, the last
    repeated) and records what it was sent."""

    def __init__(self) -> None:
        self.answers: dict[str, list[Answer]] = {}
        self.received: list[tuple[str, str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                key = f"{self.command} {self.path.split('?')[0]}"
                fake.received.append((self.command, self.path, body))
                queued = fake.answers.get(key) or [(404, "application/json", b"{}")]
                status, content_type, payload = queued.pop(0) if len(queued) > 1 else queued[0]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def reply(status: int, body: Any) -> Answer:
    return (status, "application/json", json.dumps(body).encode())


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_ok_is_a_readiness_probe_that_never_raises(api: FakeApiServer) -> None:
    api.answers["GET /readyz"] = [(200, "text/plain", b"ok")]
    api.answers["GET /livez"] = [reply(500, {"message": "etcd"})]
    rest = Rest.at(api.address)
    assert rest.ok("/readyz")
    assert rest.request("GET", "/readyz") == "ok", "a body that is not JSON comes back as text"
    assert not rest.ok("/livez")
    api.server.shutdown()
    api.server.server_close()
    assert not rest.ok("/readyz"), "a server that is gone is not ready"


def test_create_or_replace_posts_a_new_object_and_puts_over_one_that_exists(
    api: FakeApiServer,
) -> None:
    api.answers["POST /api/v1/namespaces/x/configmaps"] = [reply(201, {})]
    rest = Rest.at(api.address)
    body = {"metadata": {"name": "a"}, "data": {"k": "v"}}
    rest.create_or_replace("/api/v1/namespaces/x/configmaps", body)
    assert [(m, p) for m, p, _ in api.received] == [
        ("GET", "/api/v1/namespaces/x/configmaps/a"),
        ("POST", "/api/v1/namespaces/x/configmaps"),
    ]
    api.received.clear()
    api.answers["GET /api/v1/namespaces/x/configmaps/a"] = [
        reply(200, {"metadata": {"name": "a", "resourceVersion": "7"}}),
        reply(200, {"metadata": {"name": "a", "resourceVersion": "8"}}),
    ]
    # Another writer gets in between the first read and its replacement.
    api.answers["PUT /api/v1/namespaces/x/configmaps/a"] = [
        reply(409, {"reason": "Conflict", "message": "the object has been modified"}),
        reply(200, {}),
    ]
    rest.create_or_replace("/api/v1/namespaces/x/configmaps", body)
    puts = [sent for method, _, sent in api.received if method == "PUT"]
    assert [put["metadata"]["resourceVersion"] for put in puts] == ["7", "8"]
    assert puts[-1]["data"] == {"k": "v"}


def test_create_or_replace_gives_up_on_a_refusal_other_than_a_conflict(
    api: FakeApiServer,
) -> None:
    api.answers["GET /api/v1/nodes/n"] = [reply(403, {"reason": "Forbidden", "message": "no"})]
    with pytest.raises(ApiError) as refused:
        Rest.at(api.address).create_or_replace("/api/v1/nodes", {"metadata": {"name": "n"}})
    assert refused.value.status == 403


def test_a_watch_gives_its_events_and_ends_expired_on_410(api: FakeApiServer) -> None:
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "2"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
    ]
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    api.answers["GET /api/v1/pods"] = [(200, "application/json", lines)]
    seen: list[tuple[str, str]] = []

    def follow() -> None:
        with Rest.at(api.address).watch("/api/v1/pods", {"resourceVersion": "1"}) as stream:
            for kind, obj in stream:
                seen.append((kind, obj["metadata"]["resourceVersion"]))

    with pytest.raises(WatchExpired):
        follow()
    assert seen == [("ADDED", "2"), ("BOOKMARK", "3")]
    (_, path, _) = api.received[0]
    assert "watch=true" in path
    assert "resourceVersion=1" in path


def test_an_error_event_other_than_expiry_is_an_api_error(api: FakeApiServer) -> None:
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}
    api.answers["GET /api/v1/pods"] = [(200, "application/json", json.dumps(error).encode())]
    with pytest.raises(ApiError) as failed, Rest.at(api.address).watch("/api/v1/pods", {}) as s:
        list(s)
    assert failed.value.status == 500
