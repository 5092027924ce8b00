"""Which backends an e2e scenario runs on (support/backends.py): once by default, on kind
or, for the path `make demo` runs and the local node's fake GPUs, on the local cluster; on
each one `--backends` names."""

from __future__ import annotations

from typing import Any

import pytest
from support.backends import ONCE, backend_params


class Options:
    def __init__(self, backends: str) -> None:
        self.backends = backends

    def getoption(self, name: str) -> str:
        assert name == "--backends"
        return self.backends


def chosen(backends: str, local_by_default: bool) -> list[tuple[str, set[str]]]:
    params: list[Any] = backend_params(Options(backends), local_by_default)  # type: ignore[arg-type]
    return [(p.values[0], {m.name for m in p.marks}) for p in params]


def test_by_default_a_scenario_runs_once_on_kind_or_on_the_local_cluster_where_marked() -> None:
    assert chosen(ONCE, local_by_default=False) == [("kind", {"kind"})]
    assert chosen(ONCE, local_by_default=True) == [("local", set())]


def test_named_backends_run_every_scenario_on_each() -> None:
    for local_by_default in (False, True):
        assert chosen("local,kind", local_by_default) == [("local", set()), ("kind", {"kind"})]
    assert chosen("kind", local_by_default=True) == [("kind", {"kind"})]


def test_an_unknown_backend_is_a_usage_error() -> None:
    with pytest.raises(pytest.UsageError, match="unknown docker"):
        chosen("local,docker", local_by_default=False)
