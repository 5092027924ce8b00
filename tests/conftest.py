from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.interrupt import interrupt_on_sigterm

if TYPE_CHECKING:
    # Not imported at run time: pytest_plugins loads it, and rewrites its asserts, below.
    from support.early_runs import EarlyRuns

pytest_plugins = [
    "support.cluster",
    "support.early_runs",
    "support.fixtures",
    "support.backends",
    "support.kueue",
]

TESTS = Path(__file__).resolve().parent
#: The tiers: each test has exactly one marker of these (pyproject's markers say what each
#: needs), and its folder agrees; tests/cluster tests the local cluster itself, at any tier.
TIERS = {"unit", "tools", "tensorflow", "integration", "e2e", "kind"}
FOLDER_TIERS = {
    "unit": {"unit"},
    "tools": {"tools"},
    "trainer": {"tensorflow"},
    "integration": {"integration"},
    "e2e": {"e2e", "kind"},
}

#: The order the folders run in: the pyramid from its base, so that a failure that needs no
#: cluster shows within a minute, and the TensorFlow processes of tests/trainer do not share
#: the two cores with a session cluster idling until the end. Each module stays whole (its
#: module-scoped fixtures are set up once); pytest's own order holds within a folder.
FOLDER_ORDER = ("unit", "tools", "trainer", "cluster", "e2e", "integration")
#: The harness runs tests mark `early_run` (support/early_runs.py) start in the background
#: with the first test of this folder: the folders before it are CPU-bound (unit, trainer)
#: or compare the host before and after a cluster of theirs (cluster), which another
#: cluster starting beside them would change.
EARLY_RUNS_FROM = "e2e"


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()


@pytest.fixture(autouse=True)
def _start_early_runs(request: pytest.FixtureRequest) -> None:
    if _folder_rank(_folder(request.node)) >= FOLDER_ORDER.index(EARLY_RUNS_FROM):
        early_runs: EarlyRuns = request.getfixturevalue("early_runs")
        early_runs.start_all()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuses a test without exactly one tier, or in a folder of another tier; orders the
    folders as FOLDER_ORDER says."""
    wrong = []
    for item in items:
        tiers = {mark.name for mark in item.iter_markers()} & TIERS
        folder = _folder(item)
        allowed = FOLDER_TIERS.get(folder, TIERS)
        if len(tiers) != 1 or not tiers <= allowed:
            wrong.append(f"{item.nodeid}: {sorted(tiers) or 'no tier'} in tests/{folder}")
    if wrong:
        raise pytest.UsageError("tests whose tier marker is missing or wrong:\n" + "\n".join(wrong))
    items.sort(key=lambda item: _folder_rank(_folder(item)))


def _folder(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).parts[0]


def _folder_rank(folder: str) -> int:
    """Where a folder runs: as FOLDER_ORDER says, a folder it does not name last."""
    return FOLDER_ORDER.index(folder) if folder in FOLDER_ORDER else len(FOLDER_ORDER)
