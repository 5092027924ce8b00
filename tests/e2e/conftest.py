"""Every scenario's wall time, printed in its own section at the end of the pytest output."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

WALL_TIMES: list[str] = []


@pytest.fixture(autouse=True)
def _wall_time(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    WALL_TIMES.append(f"{request.node.nodeid}: {time.monotonic() - started:.1f} s")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if WALL_TIMES:
        terminalreporter.section("e2e scenarios: wall time")
        for line in WALL_TIMES:
            terminalreporter.write_line(line)
