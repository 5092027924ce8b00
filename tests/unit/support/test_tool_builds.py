"""Which Go-built tools a test waits for before its time limit (support/tool_builds.py)."""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any, cast

import pytest
from support import tool_builds
from support.checkout import ROOT

from tfjob_localcluster.binaries import tools


def item(fixturenames: list[str], params: dict[str, Any] | None = None) -> pytest.Item:
    callspec = None if params is None else SimpleNamespace(params=params)
    return cast(pytest.Item, SimpleNamespace(fixturenames=fixturenames, callspec=callspec))


def test_a_test_waits_for_the_tools_of_its_fixtures_and_of_those_its_parameters_name() -> None:
    assert tool_builds.tools_needed(item(["tfjobs", "kueue", "queue"])) == ["kueue"]
    assert tool_builds.tools_needed(item(["kind_cluster", "oci_registry"])) == ["kind", "registry"]
    # test_gang.py takes its scheduler with request.getfixturevalue(fixture), the kind
    # backend its cluster with request.getfixturevalue("kind_cluster").
    named = item(["request", "tfjobs"], {"fixture": "coscheduling", "scheduler": "x"})
    assert tool_builds.tools_needed(named) == ["scheduler-plugins"]
    assert tool_builds.tools_needed(item(["backend"], {"backend": "kind"})) == ["kind", "registry"]
    assert tool_builds.tools_needed(item(["backend"], {"backend": "local"})) == []
    assert tool_builds.tools_needed(item(["tfjobs"], {"epochs": 3, "name": "x"})) == []


def test_each_need_named_by_a_fixture_of_the_tests_or_a_parameter_is_a_go_built_tool() -> None:
    fixtures = set()
    for module in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                "fixture" in ast.unparse(decorator) for decorator in node.decorator_list
            ):
                fixtures.add(node.name)
    named_by_fixtures = {name for name in tool_builds.NEEDS if name in fixtures}
    assert named_by_fixtures == {
        "oci_registry",
        "kind_cluster",
        "kueue",
        "coscheduling",
        "volcano",
        "prometheus_binaries",
        "monitoring",
        "signing_key",
        "release",
    }
    # The others are parameters' values: the backend's and the gang schedulers' names.
    assert set(tool_builds.NEEDS) - named_by_fixtures == {"kind", "scheduler-plugins"}
    assert {tool for needs in tool_builds.NEEDS.values() for tool in needs} <= set(tools())
