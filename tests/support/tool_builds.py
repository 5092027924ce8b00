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

#: What makes a test need a Go-built tool: a fixture that runs it beside a cluster, or a
#: parameter by which a fixture asks for that fixture (`request.getfixturevalue`: the
#: backend `kind`, a gang scheduler by name); the tools each needs.
NEEDS = {
    "oci_registry": ("registry",),
    "kind_cluster": ("registry", "kind"),
    "kind": ("registry", "kind"),
    "kueue": ("kueue",),
    "coscheduling": ("scheduler-plugins",),
    "scheduler-plugins": ("scheduler-plugins",),
    "volcano": ("volcano",),
    "prometheus_binaries": ("prometheus",),
    "monitoring": ("kueue", "prometheus"),
    # The release's tests: a registry to push to, cosign and syft to sign and verify.
    "signing_key": ("cosign",),
    "release": ("registry", "cosign", "syft"),
}


def tools_needed(item: pytest.Item) -> list[str]:
    """The tools a test needs (NEEDS) by the fixtures it uses and by its parameters' values,
    in the order hack/go-tools.txt builds them."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        names |= {value for value in callspec.params.values() if isinstance(value, str)}
    needed = {tool for name in names for tool in NEEDS.get(name, ())}
    return [tool for tool in binaries.tools() if tool in needed]


# First: around pytest-timeout's own wrapper, whose limit starts inside it.
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    for tool in tools_needed(item):
        waited = binaries.await_build(binaries.tool_dir(tool))
        if waited >= 1:
            summary.add(SECTION, f"{item.nodeid}: {waited:.0f} s for {tool}")
    yield
