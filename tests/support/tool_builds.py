"""A test that needs a Go-built tool waits for its build before its time limit starts.

`make test` builds the tools only later tests use beside its first tests
(hack/beside-builds.sh): on a cold run, Kueue may still be compiling when the first
test that installs it comes. A program asking for a binary while its tool is being built
waits for it anyway (tfjob_localcluster.binaries); this plugin waits before the test's
protocol, outside pytest-timeout's limit, which is for the test and not for the build.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from support import summary
from tfjob_localcluster import binaries

#: The summary's section of the waits (support/summary.py).
SECTION = "tests that waited for a Go-built tool's build beside them"

#: The fixtures that run a Go-built tool beside a cluster, and the tool each runs.
FIXTURE_TOOLS = {
    "oci_registry": "registry",
    "kind_cluster": "kind",
    "kueue": "kueue",
    "coscheduling": "scheduler-plugins",
    "volcano": "volcano",
}


def tools_needed(fixturenames: list[str]) -> list[str]:
    """The tools the fixtures a test uses run, in FIXTURE_TOOLS' order."""
    return [tool for fixture, tool in FIXTURE_TOOLS.items() if fixture in fixturenames]


# First: around pytest-timeout's own wrapper, whose limit starts inside it.
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    for tool in tools_needed(list(getattr(item, "fixturenames", ()))):
        waited = binaries.await_build(binaries.tool_dir(tool))
        if waited >= 1:
            summary.add(SECTION, f"{item.nodeid}: {waited:.0f} s for {tool}")
    yield
