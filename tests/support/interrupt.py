"""A test run stopped with SIGTERM tears down what it started, as one stopped with Ctrl-C.

pytest runs fixture teardown (the clusters, the kind node, the registry, the browser)
when it is interrupted by KeyboardInterrupt, but SIGTERM, which CI runners and `kill`
send, ends the process at once and leaves all of it behind. `tests/conftest.py` has
SIGTERM raise KeyboardInterrupt instead, for the whole session.

Under pytest-xdist (`make test`, support/streams.py) the tests and their fixtures live in
the workers: the controller passes the first SIGTERM or SIGINT on to them as SIGTERM and
waits for their teardown (xdist ends the session once they report the interruption); a
second stop signal interrupts the controller itself, whose xdist then kills the workers
ten seconds later. A worker raises KeyboardInterrupt on its first stop signal only: Ctrl-C
in a terminal reaches it twice, from the terminal and from the controller, and a second
KeyboardInterrupt would cut its teardown short.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from types import FrameType

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def interrupt_on_sigterm() -> None:
    """From now on, SIGTERM raises KeyboardInterrupt in the main thread."""
    signal.signal(signal.SIGTERM, _interrupt)


def interrupt_once() -> None:
    """From now on, the first SIGTERM or SIGINT raises KeyboardInterrupt in the main
    thread; later ones are ignored."""

    def first(signum: int, frame: FrameType | None) -> None:
        for stop in _STOP_SIGNALS:
            signal.signal(stop, signal.SIG_IGN)
        _interrupt(signum, frame)

    for stop in _STOP_SIGNALS:
        signal.signal(stop, first)


def forward_to_children() -> None:
    """From now on, the first SIGTERM or SIGINT is sent on to this process's children as
    SIGTERM; the next raises KeyboardInterrupt here."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        for stop in _STOP_SIGNALS:
            signal.signal(stop, _interrupt)
        for pid in children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, signal.SIGTERM)

    for stop in _STOP_SIGNALS:
        signal.signal(stop, forward)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from each of its threads' children list."""
    found: list[int] = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in listing.read_text().split()]
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return found


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the run was asked to stop")
