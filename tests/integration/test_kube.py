"""The API layer's reading of the API server's refusals, against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.waiting import wait_until

from tfjob_operator.apiserver.aio import ApiServerClient
from tfjob_operator.apiserver.connection import load_connection
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.kube import Kube

HOLD = "tfjob.dev/test-hold"


async def _create_pod(namespace: str) -> None:
    api = ApiServerClient(load_connection())
    try:
        pod = {
            "metadata": {"name": "late"},
            "spec": {"containers": [{"name": "c", "image": "none", "command": ["true"]}]},
        }
        await Kube(api).create_pod(namespace, pod)
    finally:
        await api.close()


@pytest.fixture(autouse=True)
def _operator_kubeconfig(kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's own loader reads $KUBECONFIG, as when it runs outside a cluster."""
    monkeypatch.setenv("KUBECONFIG", kubeconfig)


def test_create_in_a_terminating_namespace_is_recognised(core_v1: Any, namespace: str) -> None:
    # A finalizer on one object keeps the namespace in Terminating for as long as needed.
    core_v1.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": [HOLD]}}
    )
    core_v1.delete_namespace(namespace)
    wait_until(
        lambda: core_v1.read_namespace(namespace).status.phase == "Terminating",
        30,
        "the namespace to be Terminating",
        interval=0.1,
    )
    try:
        with pytest.raises(ApiError) as refused:
            asyncio.run(_create_pod(namespace))
        assert refused.value.status == 403
        assert refused.value.namespace_terminating
    finally:
        core_v1.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})


def test_other_refusals_are_not_taken_for_a_terminating_namespace(namespace: str) -> None:
    with pytest.raises(ApiError) as refused:
        asyncio.run(_create_pod(f"{namespace}-missing"))
    assert refused.value.status == 404
    assert not refused.value.namespace_terminating


def test_collection_delete_takes_the_jobs_children_and_keeps_the_rest(
    core_v1: Any, namespace: str
) -> None:
    def pod(name: str, uid: str) -> dict[str, Any]:
        labels = {"tfjob.dev/controller-uid": uid} if uid else {}
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "containers": [{"name": "c", "image": "none"}],
                "terminationGracePeriodSeconds": 0,
            },
        }

    def service(name: str, uid: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"tfjob.dev/controller-uid": uid}},
            "spec": {"clusterIP": "None", "ports": [{"port": 2222}]},
        }

    for name, uid in [("a-0", "job-a"), ("a-1", "job-a"), ("a-2", "job-a"), ("b-0", "job-b")]:
        core_v1.create_namespaced_pod(namespace, pod(name, uid))
        core_v1.create_namespaced_service(namespace, service(name, uid))
    core_v1.create_namespaced_pod(namespace, pod("unlabelled", ""))

    async def delete(plural: str) -> list[tuple[str, str]]:
        api = ApiServerClient(load_connection())
        try:
            return await Kube(api).delete_collection(namespace, plural, "job-a", {"a-2"})
        finally:
            await api.close()

    for plural, listing in (
        ("pods", core_v1.list_namespaced_pod),
        ("services", core_v1.list_namespaced_service),
    ):
        gone = asyncio.run(delete(plural))
        assert sorted(name for name, _ in gone) == ["a-0", "a-1"]
        assert all(uid for _, uid in gone)
        left = {
            item.metadata.name
            for item in listing(namespace).items
            if item.metadata.deletion_timestamp is None
        }
        assert {"a-2", "b-0"} <= left
        assert not {"a-0", "a-1"} & left
