"""Which backends an e2e scenario runs on (support/backends.py): once by default, on kind
or, for the path `make demo` runs, on the local cluster; on each one `--backends` names."""

from __future__ import annotations

from typing import Any

import pytest
from support.backends import ONCE, backend_params

pytestmark = pytest.mark.unit


class Options:
    def __init__(self, backends: str) -> None:
        self.backends = backends

    def getoption(self, name: str) -> str:
        assert name == "--backends"
        return self.backends


def chosen(backends: str, demo_path: bool) -> list[tuple[str, set[str]]]:
    params: list[Any] = backend_params(Options(backends), demo_path)  # type: ignore[arg-type]
    return [(p.values[0], {m.name for m in p.marks}) for p in params]


def test_by_default_a_scenario_runs_once_on_kind_and_the_demo_path_on_the_local_cluster() -> None:
    assert chosen(ONCE, demo_path=False) == [("kind", {"kind"})]
    assert chosen(ONCE, demo_path=True) == [("local", {"e2e"})]


def test_named_backends_run_every_scenario_on_each() -> None:
    for demo_path in (False, True):
        assert chosen("local,kind", demo_path) == [("local", {"e2e"}), ("kind", {"kind"})]
    assert chosen("kind", demo_path=True) == [("kind", {"kind"})]


def test_an_unknown_backend_is_a_usage_error() -> None:
    with pytest.raises(pytest.UsageError, match="unknown docker"):
        chosen("local,docker", demo_path=False)
