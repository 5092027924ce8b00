"""The API layer's reading of the API server's refusals, against the real server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes_asyncio import client

from tfjob_operator.kube import ApiError, Kube, load_configuration

pytestmark = pytest.mark.integration

HOLD = "tfjob.dev/test-hold"


async def _create_pod(namespace: str) -> None:
    async with client.ApiClient(await load_configuration()) as api_client:
        pod = {
            "metadata": {"name": "late"},
            "spec": {"containers": [{"name": "c", "image": "none", "command": ["true"]}]},
        }
        await Kube(api_client).create_pod(namespace, pod)


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
    deadline = time.monotonic() + 30
    while core_v1.read_namespace(namespace).status.phase != "Terminating":
        assert time.monotonic() < deadline, "namespace never reached Terminating"
        time.sleep(0.1)
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
