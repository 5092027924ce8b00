"""The benchmark's view of a run, fed by watch events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

# The benchmark is not an installed package: it runs from the repository root.
from bench.progress import JobFailed, Progress, WaitTimeout
from harness.apiclient import SYNCED


def pod(name: str, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def job(name: str, condition: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": condition, "status": "True", "message": "why"}]},
    }


def progress() -> Progress:
    return Progress.expecting(["a-chief-0", "a-worker-0"], ["a-chief-0"])


def test_children_are_counted_once_created_and_while_running() -> None:
    seen = progress()
    seen.on_pod("ADDED", pod("a-chief-0"))
    seen.on_pod("ADDED", pod("other-pod"))
    seen.on_service("ADDED", {"metadata": {"name": "a-chief-0"}})
    assert not seen.all_created()
    seen.on_pod("ADDED", pod("a-worker-0", "Running"))
    seen.on_service("ADDED", {"metadata": {"name": "a-worker-0"}})
    assert seen.all_created()
    assert not seen.all_running()
    seen.on_pod("MODIFIED", pod("a-chief-0", "Running"))
    assert seen.all_running()
    assert seen.leader_pods["a-chief-0"]["status"]["phase"] == "Running"
    seen.on_pod("DELETED", pod("a-worker-0", "Running"))
    assert seen.only_leaders_left()
    assert seen.all_created(), "a deleted child still counts as created"


def test_a_fresh_listing_forgets_pods_deleted_while_no_watch_ran() -> None:
    seen = progress()
    seen.on_pod("ADDED", pod("a-chief-0", "Running"))
    seen.on_pod("ADDED", pod("a-worker-0", "Running"))
    seen.on_pod(SYNCED, {"items": [pod("a-chief-0", "Running")]})
    assert seen.pods_present == {"a-chief-0"}
    assert seen.only_leaders_left()


def test_succeeded_is_timed_once() -> None:
    seen = progress()
    seen.on_job("MODIFIED", job("a", "Running"))
    assert not seen.all_succeeded()
    seen.on_job("MODIFIED", job("a", "Succeeded"))
    first = seen.succeeded["a"]
    seen.on_job("MODIFIED", job("a", "Succeeded"))
    assert seen.succeeded["a"] == first
    assert seen.all_succeeded()


def test_wait_returns_when_an_event_makes_the_condition_true() -> None:
    async def scenario() -> float:
        seen = progress()
        asyncio.get_running_loop().call_later(0.05, seen.on_job, "MODIFIED", job("a", "Succeeded"))
        return await seen.wait_until(seen.all_succeeded, "succeeded", 5)

    assert asyncio.run(scenario()) > 0


def test_wait_fails_fast_on_a_failed_job_and_names_the_state_on_timeout() -> None:
    async def failing() -> None:
        seen = progress()
        seen.on_job("MODIFIED", job("a", "Failed"))
        await seen.wait_until(seen.all_succeeded, "succeeded", 5)

    with pytest.raises(JobFailed, match="TFJob a failed while waiting for succeeded: why"):
        asyncio.run(failing())

    async def stuck() -> None:
        seen = progress()
        await seen.wait_until(seen.all_running, "every pod Running", 0.1)

    with pytest.raises(WaitTimeout, match=r"every pod Running: not reached.*pods running 0/2"):
        asyncio.run(stuck())


def test_wait_stops_when_the_check_raises() -> None:
    def operator_gone() -> None:
        raise RuntimeError("the operator exited")

    async def scenario() -> None:
        seen = progress()
        await seen.wait_until(seen.all_running, "running", 5, operator_gone)

    with pytest.raises(RuntimeError, match="the operator exited"):
        asyncio.run(scenario())
