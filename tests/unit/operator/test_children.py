"""A decision's creates of a job's pods and services (children.py): slow start in batches
of 1, 2, 4, ... replicas, each replica's service before its pod, bodies rendered only when
their batch goes out, and no batch after one in which a create failed."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Collection, Coroutine, Mapping
from typing import Any

import pytest
from support.builders import JOB

from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.children import MAX_CREATE_BATCH, ChildKind, Children, ChildWrites, Pending
from tfjob_operator.events import Event
from tfjob_operator.plan import Creation


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


class FakeApi:
    """Creates that yield to the loop, so a batch's creates overlap, recording when each
    starts and ends; `refuse` names the children the API server refuses as invalid."""

    def __init__(self, refuse: Collection[str] = ()) -> None:
        self.log: list[tuple[str, str]] = []
        self.refuse = set(refuse)

    def kind(self, noun: str) -> ChildKind:
        async def create(namespace: str, body: Mapping[str, Any]) -> bool:
            name = f"{noun}/{body['metadata']['name']}"
            self.log.append(("start", name))
            await asyncio.sleep(0)
            self.log.append(("end", name))
            if name in self.refuse:
                raise ApiError(422, name, b'{"reason": "Invalid", "message": "no"}')
            return True

        async def delete(namespace: str, name: str, uid: str) -> bool:
            return True

        return ChildKind(noun, create, delete, Counter())

    def batches(self) -> list[list[str]]:
        """The creates started together: a batch starts once the one before has ended."""
        batches: list[list[str]] = []
        previous = "end"
        for what, name in self.log:
            if what == "start":
                if previous == "end":
                    batches.append([])
                batches[-1].append(name)
            previous = what
        return batches


class FakeHost:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.refused_names: list[str] = []

    def record(self, event: Event) -> None:
        self.events.append(event)

    def accepted(self, noun: str, name: str) -> None:
        pass

    def refused(self, noun: str, child: Mapping[str, Any], error: ApiError) -> None:
        self.refused_names.append(f"{noun}/{child['metadata']['name']}")

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        raise AssertionError("no clean-up here")

    def decide_again(self) -> None:
        pass

    def monotonic(self) -> float:
        return 0.0

    async def delete_collection(self, plural: str, keep: Collection[str]) -> list[tuple[str, str]]:
        return []


def creations(names: list[str], rendered: list[str]) -> list[Creation]:
    def render(name: str) -> dict[str, Any]:
        rendered.append(name)
        return {"metadata": {"name": name}}

    return [Creation(name, functools.partial(render, name)) for name in names]


def apply(api: FakeApi, pods: list[str], services: list[str], rendered: list[str]) -> FakeHost:
    host = FakeHost()
    kinds = [
        Children(api.kind("pod"), creations(pods, rendered), (), Pending(), ()),
        Children(api.kind("service"), creations(services, rendered), (), Pending(), ()),
    ]
    asyncio.run(ChildWrites(JOB, host).apply(kinds))
    return host


def names(count: int) -> list[str]:
    return [f"mnist-worker-{i}" for i in range(count)]


def test_creates_go_out_in_doubling_batches_of_replicas_each_service_before_its_pod() -> None:
    api = FakeApi()
    apply(api, names(7), names(7), [])
    batches = api.batches()
    assert [len(b) for b in batches] == [2, 4, 8]  # 1, 2, 4 replicas: a service and a pod each
    assert batches[0] == ["service/mnist-worker-0", "pod/mnist-worker-0"]
    assert [n for b in batches for n in b if n.startswith("pod/")] == [f"pod/{n}" for n in names(7)]


def test_a_batch_holds_at_most_max_create_batch_replicas() -> None:
    api = FakeApi()
    count = 3 * MAX_CREATE_BATCH
    apply(api, names(count), [], [])
    sizes = [len(b) for b in api.batches()]
    assert sum(sizes) == count
    assert max(sizes) == MAX_CREATE_BATCH
    assert sizes[:3] == [1, 2, 4]


def test_replicas_whose_services_exist_keep_the_pods_order_and_services_alone_come_last() -> None:
    """A restart recreates pods whose services exist; a gang's services go out before its
    pods may."""
    api = FakeApi()
    apply(api, ["mnist-chief-0", "mnist-worker-1"], ["mnist-worker-1", "mnist-worker-2"], [])
    assert api.batches() == [
        ["pod/mnist-chief-0"],
        ["service/mnist-worker-1", "pod/mnist-worker-1", "service/mnist-worker-2"],
    ]


def test_a_refusal_stops_the_creates_after_its_batch_and_later_bodies_are_never_rendered() -> None:
    api = FakeApi(refuse={"pod/mnist-worker-1"})
    rendered: list[str] = []
    host = apply(api, names(100), [], rendered)
    assert api.batches() == [["pod/mnist-worker-0"], ["pod/mnist-worker-1", "pod/mnist-worker-2"]]
    assert host.refused_names == ["pod/mnist-worker-1"]
    assert rendered == names(3), "a body is rendered when its batch is sent, not before"


def test_a_failed_create_is_raised_once_its_batch_has_run_and_nothing_follows() -> None:
    api = FakeApi()

    async def failing(namespace: str, body: Mapping[str, Any]) -> bool:
        api.log.append(("start", body["metadata"]["name"]))
        await asyncio.sleep(0)
        api.log.append(("end", body["metadata"]["name"]))
        if body["metadata"]["name"] == "mnist-worker-0":
            raise ApiError(500, "pod", b'{"reason": "InternalError", "message": "etcd"}')
        return True

    async def delete(namespace: str, name: str, uid: str) -> bool:
        return True

    host = FakeHost()
    kind = ChildKind("pod", failing, delete, Counter())
    pods = Children(kind, creations(names(4), []), (), Pending(), ())
    with pytest.raises(ApiError, match="etcd"):
        asyncio.run(ChildWrites(JOB, host).apply([pods]))
    assert api.batches() == [["mnist-worker-0"]]
    assert [e.reason for e in host.events] == ["FailedCreatePod"]
