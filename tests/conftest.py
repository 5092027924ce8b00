from __future__ import annotations

from pathlib import Path

import pytest

# The support package's asserts are rewritten as the tests' are: it is imported here,
# before pytest_plugins would have registered its modules for that.
pytest.register_assert_rewrite("support")
from support import streams, tool_builds  # noqa: E402
from support.early_runs import EarlyRuns, marked_run  # noqa: E402

pytest_plugins = [
    "support.cluster",
    "support.early_runs",
    "support.fixtures",
    "support.backends",
    "support.kueue",
    "support.multikueue",
    "support.streams",
    "support.summary",
    "support.tool_builds",
]

TESTS = Path(__file__).resolve().parent
#: The tiers: each test has exactly one marker of these (pyproject's markers say what each
#: needs). A folder of tests of one tier gives its tests that tier at collection (they do
#: not write it); tests/e2e gives `e2e` to a test not marked `kind` (support/backends.py
#: marks each scenario for its backend); tests/cluster tests the local cluster itself, at
#: any tier, each module naming its own.
TIERS = {"unit", "tools", "tensorflow", "integration", "e2e", "kind"}
#: The tier a folder gives a test that has no other of the folder's tiers (FOLDER_TIERS).
FOLDER_TIER = {
    "unit": "unit",
    "tools": "tools",
    "trainer": "tensorflow",
    "integration": "integration",
    "e2e": "e2e",
}
#: The tiers a folder holds: its own, and in tests/e2e the scenarios on kind.
FOLDER_TIERS = {folder: {tier} for folder, tier in FOLDER_TIER.items()}
FOLDER_TIERS["e2e"].add("kind")

#: The order the folders run in: the pyramid from its base, so that a failure that needs no
#: cluster shows within a minute, and the TensorFlow processes of tests/trainer do not share
#: the two cores with a session cluster idling until the end. Each module stays whole (its
#: module-scoped fixtures are set up once); within a folder, the modules with a test that
#: needs a Go-built tool (support/tool_builds.py), which a cold run may still be building
#: beside the tests, come after the others, in pytest's own order as the others are.
FOLDER_ORDER = ("unit", "tools", "trainer", "cluster", "e2e", "integration")
#: The tests of the `apart` stream (support/streams.py), which needs none of the session's
#: local cluster: in each folder, the markers that put a test there. Every other test is
#: in the `session-cluster` stream, which starts with tests/cluster (it compares the host,
#: and the `apart` stream's clusters wait for it to be done).
APART = {
    "unit": {"unit"},
    "tools": {"tools"},
    "trainer": {"tensorflow"},
    "e2e": {"kind", "own_clusters"},
}
#: Modules of the `session-cluster` stream's folders that the `apart` stream runs instead,
#: on a local cluster of its own (the session fixtures start one in its worker when a test
#: there first asks for it), to even out the two streams' lengths: chosen by their
#: durations in a warm `make test` (docs/development.md).
APART_MODULES = {"integration/test_leader_election.py", "integration/test_runtime_errors.py"}
#: From a stream's first test of this folder on, clusters other than the session's may run
#: beside it: the harness runs its tests mark `early_run` (support/early_runs.py) start in
#: the background, and the `apart` stream's tests wait for the `session-cluster` stream to
#: get here. The folders before are CPU-bound (unit, trainer) or compare the host before
#: and after a cluster of their own (cluster), which another cluster would change.
SHARED_HOST_FROM = "e2e"
#: The streams whose early runs were started.
_EARLY_RUNS_STARTED = pytest.StashKey[set[str]]()
#: The tier a test's module marks though its folder gives it.
_WRITTEN_TWICE = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: where it shares the host, lets the other stream in, or
    waits to be let in."""
    if not _shares_host(item):
        return
    if streams.stream_of(item) == streams.SESSION_CLUSTER:
        streams.host_checks_done(item.config)
    else:
        streams.wait_for_host_checks(item.config)


@pytest.fixture(autouse=True)
def _start_early_runs(request: pytest.FixtureRequest) -> None:
    item = request.node
    stream = streams.stream_of(item)
    started = request.config.stash.setdefault(_EARLY_RUNS_STARTED, set())
    if _shares_host(item) and stream not in started:
        early_runs: EarlyRuns = request.getfixturevalue("early_runs")
        early_runs.start(
            run
            for other in request.session.items
            if streams.stream_of(other) == stream and (run := marked_run(other)) is not None
        )
        started.add(stream)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Gives the test its folder's tier (FOLDER_TIER) before `-m` selects by it; a tier
    the folder already gives, written in the test's module, is refused at collection
    (pytest_collection_modifyitems), so each test's tier is said once."""
    tier = FOLDER_TIER.get(_folder(item))
    if tier is None:
        return
    written = _tiers(item)
    if tier in written:
        item.stash[_WRITTEN_TWICE] = tier
    elif not written:
        item.add_marker(tier)


# First: pytest-xdist's own hook reads the streams' marks.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuses a test without exactly one tier, in a folder of another tier, or naming the
    tier its folder gives; puts each in its stream; orders the folders as FOLDER_ORDER
    says."""
    wrong = []
    for item in items:
        tiers = _tiers(item)
        folder = _folder(item)
        allowed = FOLDER_TIERS.get(folder, TIERS)
        if len(tiers) != 1 or not tiers <= allowed:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'} in tests/{folder}")
        elif (twice := item.stash.get(_WRITTEN_TWICE, None)) is not None:
            wrong.append(f"{item.nodeid}: marks {twice}, which tests/{folder} gives it")
        apart = {mark.name for mark in item.iter_markers()} & APART.get(folder, set())
        apart_module = item.path.relative_to(TESTS).as_posix() in APART_MODULES
        streams.assign(item, streams.APART if apart or apart_module else streams.SESSION_CLUSTER)
    if wrong:
        raise pytest.UsageError("tests whose tier marker is missing or wrong:\n" + "\n".join(wrong))
    needing_tools = {item.path for item in items if tool_builds.tools_needed(item)}
    items.sort(key=lambda item: (_folder_rank(_folder(item)), item.path in needing_tools))


def _tiers(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()} & TIERS


def _shares_host(item: pytest.Item) -> bool:
    return _folder_rank(_folder(item)) >= FOLDER_ORDER.index(SHARED_HOST_FROM)


def _folder(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).parts[0]


def _folder_rank(folder: str) -> int:
    """Where a folder runs: as FOLDER_ORDER says, a folder it does not name last."""
    return FOLDER_ORDER.index(folder) if folder in FOLDER_ORDER else len(FOLDER_ORDER)
