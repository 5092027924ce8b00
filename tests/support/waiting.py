"""Waiting in tests: one loop, which fails saying what it waited for and what it saw.

A test waits on something outside it (an API server, a kubelet, a process) by polling. Every
such wait goes through `wait_until`, so that each has a timeout, none sleeps a fixed time
more than it must, and a timeout's message is written once: what was awaited, for how long,
and, where the caller can say it, what was there instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from tfjob_localcluster.waiting import wait_until as polled

T = TypeVar("T")


@overload
def wait_until(
    check: Callable[[], T | None],
    timeout: float,
    what: str | Callable[[T | None], str],
    *,
    interval: float = 0.25,
) -> T: ...


@overload
def wait_until(
    check: Callable[[], T],
    timeout: float,
    what: str | Callable[[T], str],
    *,
    until: Callable[[T], bool],
    interval: float = 0.25,
) -> T: ...


def wait_until(
    check: Callable[[], Any],
    timeout: float,
    what: str | Callable[[Any], str],
    *,
    until: Callable[[Any], bool] = bool,
    interval: float = 0.25,
) -> Any:
    """Calls `check` until `until` holds for what it returned (by default: until that is
    true), and returns that. Past `timeout` seconds, fails with an AssertionError
    naming `what`; a function is given the last value, to say what was seen. The loop is
    the local cluster's (tfjob_localcluster.waiting)."""
    seen: list[Any] = []

    def held() -> tuple[Any] | None:
        seen[:] = [check()]
        return (seen[0],) if until(seen[0]) else None

    def timed_out() -> AssertionError:
        described = what(seen[0]) if callable(what) else what
        return AssertionError(f"timed out after {timeout:g} s waiting for {described}")

    return polled(held, timeout, timed_out, interval=interval)[0]
