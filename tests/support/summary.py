"""Sections printed at the end of the pytest output (the scenarios' wall times, the trainer
processes' peak RSS, a cluster state dir kept for inspection), from whichever process
wrote them.

Under `make test` the tests run in two pytest-xdist workers (support/streams.py), and a
worker's terminal summary is never shown: each worker hands its lines to the controller
with its `workeroutput` when its session ends, and the controller prints them all.
"""

from __future__ import annotations

from typing import Any

import pytest

#: Section title -> its lines, in the order they were added.
SECTIONS: dict[str, list[str]] = {}
_OUTPUT_KEY = "summary_sections"


def add(section: str, line: str) -> None:
    SECTIONS.setdefault(section, []).append(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker, after the session's fixtures were torn down (trylast: after pytest's
    own sessionfinish), and before xdist sends the worker's output to the controller."""
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[_OUTPUT_KEY] = SECTIONS


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the controller: a worker's sections, added to its own."""
    sections: dict[str, list[str]] = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY, {})
    for section, lines in sections.items():
        for line in lines:
            add(section, line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for section, lines in SECTIONS.items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)
