"""A test's tier comes from its folder (tests/conftest.py): selected by `-m` without a
marker written in the test; a test that writes its folder's tier again, or a tier its
folder does not hold, stops the collection naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.checkout import ROOT

TESTS = ROOT / "tests"
INI = (
    "[pytest]\nmarkers =\n    unit\n    tools\n    tensorflow\n    integration\n    e2e\n    kind\n"
)


def collect(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
        "--rootdir", str(root), "-c", str(root / "pytest.ini"), *args, str(root / "tests"),
    ]  # fmt: skip
    path = os.pathsep.join([str(TESTS), str(ROOT)])
    environment = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=60)


def tree(root: Path, modules: dict[str, str]) -> None:
    tests = root / "tests"
    for path, text in modules.items():
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text(f"import pytest\n\n{text}\ndef test_it():\n    pass\n")
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (root / "pytest.ini").write_text(INI)


def test_the_folder_gives_the_tier_that_m_selects(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "unit/test_pure.py": "",
            "integration/test_api.py": "",
            "e2e/test_local.py": "",
            "e2e/test_kind.py": "pytestmark = pytest.mark.kind\n",
            "cluster/test_host.py": "pytestmark = pytest.mark.integration\n",
        },
    )
    for tier, selected in {
        "unit": ["unit/test_pure.py"],
        "integration": ["cluster/test_host.py", "integration/test_api.py"],
        "e2e": ["e2e/test_local.py"],
        "kind": ["e2e/test_kind.py"],
        "tensorflow": [],
    }.items():
        done = collect(tmp_path, "-m", tier)
        listed = sorted(
            line.split("::")[0].removeprefix("tests/")
            for line in done.stdout.splitlines()
            if "::" in line
        )
        assert listed == selected, (tier, done.stdout + done.stderr)


def test_a_tier_written_twice_or_in_the_wrong_folder_stops_the_collection(
    tmp_path: Path,
) -> None:
    tree(
        tmp_path,
        {
            "unit/test_twice.py": "pytestmark = pytest.mark.unit\n",
            "unit/test_elsewhere.py": "pytestmark = pytest.mark.integration\n",
            "cluster/test_none.py": "",
        },
    )
    done = collect(tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert "tests/unit/test_twice.py::test_it: marks unit, which tests/unit gives it" in done.stderr
    assert "tests/unit/test_elsewhere.py::test_it: ['integration'] in tests/unit" in done.stderr
    assert "tests/cluster/test_none.py::test_it: no tier in tests/cluster" in done.stderr
