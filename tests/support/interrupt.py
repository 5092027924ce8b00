"""A test run stopped with SIGTERM tears down what it started, as one stopped with Ctrl-C.

pytest runs fixture teardown (the clusters, the kind node, the registry, the browser)
when it is interrupted by KeyboardInterrupt, but SIGTERM, which CI runners and `kill`
send, ends the process at once and leaves all of it behind. `tests/conftest.py` has
SIGTERM raise KeyboardInterrupt instead, for the whole session.
"""

from __future__ import annotations

import signal
from types import FrameType


def interrupt_on_sigterm() -> None:
    """From now on, SIGTERM raises KeyboardInterrupt in the main thread."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the run was asked to stop")
