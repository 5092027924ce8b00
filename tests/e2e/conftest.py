"""The `tfjobs` fixture (a fresh namespace per test, on the module's backend); every
scenario's wall time, printed in its own section at the end of the pytest output; and, for
a scenario that fails, the diagnosis `make demo` prints for a stall: each pod of
its namespace and of the operator with its phase, why it waits, last events and log lines
(the trainers' logs name the peers they wait for)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import summary
from support.backends import RELEASE_NAMESPACE, SCENARIO_KEY, Backend
from support.tfjobs import TFJobs, rest_of
from support.waiting import wait_until

from tfjob_localcluster.addons.chart import SELECTOR
from tfjob_localcluster.diagnose import describe_pods
from tfjob_operator.apiserver.errors import ApiError

#: The section of the pytest output (support/summary.py) with each scenario's wall time.
WALL_TIMES = "e2e scenarios: wall time"


@pytest.fixture
def tfjobs(backend: Backend, request: pytest.FixtureRequest) -> Iterator[TFJobs]:
    """A fresh namespace in the backend's cluster, with TFJob helpers bound to it."""
    name = f"e2e-{request.node.originalname.removeprefix('test_')[:30].replace('_', '-')}"
    name = f"{name.rstrip('-')}-{secrets.token_hex(3)}"
    tfjobs = TFJobs(backend.kubeconfig, name)
    tfjobs.rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    wait_until(
        lambda: tfjobs.rest.get(f"/api/v1/namespaces/{name}/serviceaccounts")["items"],
        30,
        f"the ServiceAccount {name}/default",
        interval=0.2,
    )
    request.node.stash[SCENARIO_KEY] = (backend, name)
    yield tfjobs
    tfjobs.delete_namespace()


@pytest.fixture(autouse=True)
def _wall_time(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    summary.add(WALL_TIMES, f"{request.node.nodeid}: {time.monotonic() - started:.1f} s")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    scenario = item.stash.get(SCENARIO_KEY, None)
    if report.failed and report.when == "call" and scenario is not None:
        backend, namespace = scenario
        report.sections.append(("diagnosis", diagnosis(backend, namespace)))
    return report


def diagnosis(backend: Backend, namespace: str) -> str:
    """The cluster's health, the scenario's pods and the operator's: why a scenario failed."""
    try:
        backend.cluster.check()
        health = f"{backend.name} cluster: running"
    except Exception as error:  # what stopped, in the cluster's words
        health = f"{backend.name} cluster: {error}"
    rest = rest_of(backend.kubeconfig)
    try:
        pods = (
            f"{describe_pods(rest, namespace)}\n"
            f"operator:\n{describe_pods(rest, RELEASE_NAMESPACE, SELECTOR)}"
        )
    except (ApiError, OSError) as error:
        pods = f"(no pods read: {error})"
    return f"{health}\n{pods}"
