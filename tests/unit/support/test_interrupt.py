"""SIGTERM interrupts a test run as Ctrl-C does, so that its fixtures are torn down."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from support.interrupt import interrupt_on_sigterm


@pytest.fixture
def handlers_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_raises_keyboard_interrupt(handlers_restored: None) -> None:
    interrupt_on_sigterm()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM: the run was asked to stop"):
        signal.raise_signal(signal.SIGTERM)


def test_the_session_is_interrupted_on_sigterm() -> None:
    """tests/conftest.py installs it for every run."""
    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler)
    assert handler.__module__ == "support.interrupt"
