"""Waiting for something outside this process (a component to answer, a link to go, a
Lease to be taken): one polling loop for the local cluster, its add-ons and the harnesses.

Each wait has a limit and says, when it passes, what did not happen; a wait on a process
stops as soon as that process exits, with the end of its log, instead of waiting out its
limit (ManagedProcess.wait_ready).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    ready: Callable[[], T | None],
    within: float,
    timed_out: Callable[[], Exception],
    *,
    each: Callable[[], None] | None = None,
    interval: float = 0.1,
) -> T:
    """Calls `ready` every `interval` seconds until what it returns is true, and returns
    that. `each`, called first in every round, raises to stop the wait (what was waited
    for cannot happen any more); past `within` seconds, raises what `timed_out` makes."""
    deadline = time.monotonic() + within
    while True:
        if each is not None:
            each()
        if found := ready():
            return found
        if time.monotonic() > deadline:
            raise timed_out()
        time.sleep(interval)
