"""The watch caches: list in pages, watch, resume, relist on 410 Gone, wake changed jobs only.

The API server is an aiohttp server on a local port that answers with scripted lists and
watch streams, so the real HTTP client code runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from support.api_clients import TOKEN, client_of

from tfjob_operator import watchcache
from tfjob_operator.resources import Resource
from tfjob_operator.watchcache import Store, Watch


def pod(name: str, job: str, version: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "labels": {"tfjob.dev/job-name": job},
        },
        "status": {"phase": phase},
    }


def read(body: Mapping[str, Any]) -> tuple[str, tuple[str, str], str]:
    metadata = body["metadata"]
    key = (metadata["namespace"], metadata["labels"]["tfjob.dev/job-name"])
    return metadata["uid"], key, body["status"]["phase"]


class FakeApiServer:
    """Lists come from `lists` (one page per entry); each watch request takes the next
    script from `watches`: lines to send, then the stream ends."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]]]):
        self.lists = lists
        self.watches = watches
        self.requests: list[dict[str, str]] = []
        self.done = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert query["labelSelector"] == "tfjob.dev/job-name"
        if "watch" not in query:
            items, version, token = self._page(query.get("continue"))
            body = {"items": items, "metadata": {"resourceVersion": version, "continue": token}}
            return web.json_response(body)
        if not self.watches:
            self.done.set()
            await asyncio.sleep(3600)
        script = self.watches.pop(0)
        if script and "http" in script[0]:  # the watch is refused, with this status code
            code = script[0]["http"]
            return web.json_response({"kind": "Status", "code": code}, status=code)
        response = web.StreamResponse()
        await response.prepare(request)
        for event in script:
            await response.write(json.dumps(event).encode() + b"\n")
        return response

    def _page(self, token: str | None) -> tuple[list[dict[str, Any]], str, str]:
        index = int(token or 0)
        page = self.lists[0][index * 2 : index * 2 + 2]
        last = index * 2 + 2 >= len(self.lists[0])
        version = "100" if last else ""
        if last:
            self.lists.pop(0)
        return page, version, "" if last else str(index + 1)


def run_watch(
    server: FakeApiServer, deleted: list[tuple[tuple[str, str], str]] | None = None
) -> tuple[Store[str], list[tuple[str, str]]]:
    """Runs a watch of the server's pods; the last states of deleted pods go to `deleted`."""
    store: Store[str] = Store()
    woken: list[tuple[str, str]] = []

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/pods", server.handle)
        async with TestServer(app) as test_server:
            api = client_of(test_server)
            resource = Resource("pods", label_selector="tfjob.dev/job-name")
            last = None if deleted is None else lambda key, phase: deleted.append((key, phase))
            watch = Watch(api, resource, None, store, read, woken.append, deleted=last)
            task = asyncio.create_task(watch.run())
            await asyncio.wait_for(server.done.wait(), 10)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()

    asyncio.run(scenario())
    return store, woken


def test_list_pages_then_watch_events_then_resume_from_the_last_version() -> None:
    listed = [pod("a-worker-0", "a", 10), pod("a-worker-1", "a", 11), pod("b-worker-0", "b", 12)]
    server = FakeApiServer(
        lists=[listed],
        watches=[
            [
                {"type": "MODIFIED", "object": pod("a-worker-0", "a", 101, "Succeeded")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}},
            ],
            [{"type": "DELETED", "object": pod("b-worker-0", "b", 151)}],
        ],
    )
    store, woken = run_watch(server)
    assert sorted(store.get(("ml", "a"))) == ["Running", "Succeeded"]
    assert store.get(("ml", "b")) == []
    # The list's page tokens, then the watches from the list's version, then the bookmark's.
    assert [r.get("continue") for r in server.requests[:2]] == [None, "1"]
    assert [r["resourceVersion"] for r in server.requests[2:]] == ["100", "150", "151"]
    assert all(r["allowWatchBookmarks"] == "true" for r in server.requests[2:])
    assert woken == [("ml", "a"), ("ml", "b"), ("ml", "a"), ("ml", "b")]


def test_a_deleted_objects_last_state_is_shown_before_the_store_drops_it() -> None:
    server = FakeApiServer(
        lists=[[pod("a-worker-0", "a", 10)]],
        watches=[[{"type": "DELETED", "object": pod("a-worker-0", "a", 11, "Failed")}]],
    )
    deleted: list[tuple[tuple[str, str], str]] = []
    store, _ = run_watch(server, deleted)
    assert deleted == [(("ml", "a"), "Failed")]
    assert store.get(("ml", "a")) == []


def test_an_event_that_changes_no_record_wakes_no_job() -> None:
    server = FakeApiServer(
        lists=[[pod("a-worker-0", "a", 10)]],
        watches=[[{"type": "MODIFIED", "object": pod("a-worker-0", "a", 101)}]],
    )
    _, woken = run_watch(server)
    assert woken == [("ml", "a")]  # from the list only


def test_gone_lists_again_and_wakes_the_jobs_whose_objects_vanished() -> None:
    server = FakeApiServer(
        lists=[
            [pod("a-worker-0", "a", 10), pod("b-worker-0", "b", 11)],
            [pod("a-worker-0", "a", 10)],
        ],
        watches=[[{"type": "ERROR", "object": {"kind": "Status", "code": 410}}]],
    )
    store, woken = run_watch(server)
    assert store.keys() == [("ml", "a")]
    assert woken == [("ml", "a"), ("ml", "b"), ("ml", "b")]
    assert "watch" not in server.requests[-2]  # the relist before the last watch


def test_store_moves_a_record_whose_job_label_changed() -> None:
    store: Store[str] = Store()
    assert store.put("u1", ("ml", "a"), "Running") == {("ml", "a")}
    assert store.put("u1", ("ml", "a"), "Running") == set()
    assert store.put("u1", ("ml", "b"), "Running") == {("ml", "a"), ("ml", "b")}
    assert store.get(("ml", "a")) == []
    assert store.replace("other", []) == set()
    assert store.replace("ml", []) == {("ml", "b")}


def test_a_list_replaces_only_the_records_of_its_own_watch() -> None:
    """TFJobs of both API groups share one store: one group's list (at start, after 410
    Gone, or an absent CRD's empty one) must not drop the other's jobs."""
    store: Store[str] = Store()
    store.put("kf", ("ml", "a"), "kubeflow.org job", "tfjobs.kubeflow.org")
    assert store.replace(None, [("td", ("ml", "b"), "tfjob.dev job")], "tfjobs.tfjob.dev") == {
        ("ml", "b")
    }
    assert store.replace(None, [], "tfjobs.tfjob.dev") == {("ml", "b")}
    assert store.get(("ml", "a")) == ["kubeflow.org job"]
    assert store.replace(None, [], "tfjobs.kubeflow.org") == {("ml", "a")}
    assert store.keys() == []


def test_an_optional_resource_the_server_does_not_serve_is_synced_empty_and_looked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("tfjob_operator.watchcache.ABSENT_RECHECK_SECONDS", 0.05)
    lists = 0

    async def absent(request: web.Request) -> web.Response:
        nonlocal lists
        lists += 1
        assert "watch" not in request.query
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    async def scenario() -> tuple[bool, int]:
        app = web.Application()
        app.router.add_get("/apis/kueue.x-k8s.io/v1beta2/workloads", absent)
        async with TestServer(app) as test_server:
            api = client_of(test_server)
            resource = Resource("workloads", "/apis/kueue.x-k8s.io/v1beta2", optional=True)
            store: Store[str] = Store()
            watch = Watch(api, resource, None, store, read, lambda _: None)
            task = asyncio.create_task(watch.run())
            await asyncio.wait_for(watch.synced.wait(), 5)
            await asyncio.sleep(0.3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()
            return watch.synced.is_set(), len(store.keys())

    synced, records = asyncio.run(scenario())
    assert synced
    assert records == 0
    assert lists >= 3  # looked for again, never an error backoff


def test_an_absent_resource_is_listed_again_at_once_when_told_it_may_be_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator created a PodGroup: the gang scheduler's CRD was installed after its
    watch found none, and the watch must not wait for its next recheck to see it."""
    monkeypatch.setattr("tfjob_operator.watchcache.ABSENT_RECHECK_SECONDS", 3600)
    installed = False
    group = {**pod("gang", "gang", 7), "status": {"phase": "Pending"}}

    async def podgroups(request: web.Request) -> web.StreamResponse:
        if not installed:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if "watch" in request.query:
            response = web.StreamResponse()
            await response.prepare(request)
            await asyncio.sleep(3600)
            return response
        return web.json_response({"items": [group], "metadata": {"resourceVersion": "7"}})

    async def scenario() -> tuple[int, list[str]]:
        nonlocal installed
        app = web.Application()
        app.router.add_get("/apis/scheduling.x-k8s.io/v1alpha1/podgroups", podgroups)
        async with TestServer(app) as test_server:
            api = client_of(test_server)
            resource = Resource("podgroups", "/apis/scheduling.x-k8s.io/v1alpha1", optional=True)
            store: Store[str] = Store()
            woken: list[tuple[str, str]] = []
            watch = Watch(api, resource, None, store, read, woken.append)
            task = asyncio.create_task(watch.run())
            await asyncio.wait_for(watch.synced.wait(), 5)
            before = len(store.keys())
            installed = True
            watch.recheck()
            for _ in range(100):
                if woken:
                    break
                await asyncio.sleep(0.02)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()
            return before, store.get(("ml", "gang"))

    before, records = asyncio.run(scenario())
    assert before == 0
    assert records == ["Pending"]


def test_a_watch_that_fails_while_the_server_restarts_resumes_from_its_version_unlisted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchcache, "FIRST_BACKOFF_SECONDS", 0.05)
    server = FakeApiServer(
        lists=[[pod("a-worker-0", "a", 10)]],
        watches=[
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}}],
            [{"http": 503}],
            [{"http": 403}],  # a restarted API server whose authorizer has not read the roles
            [{"type": "MODIFIED", "object": pod("a-worker-0", "a", 160, "Succeeded")}],
        ],
    )
    store, _ = run_watch(server)
    assert store.get(("ml", "a")) == ["Succeeded"]
    assert sum("watch" not in r for r in server.requests) == 1  # listed once, never again
    watches = [r["resourceVersion"] for r in server.requests if "watch" in r]
    assert watches == ["100", "150", "150", "150", "160"]
