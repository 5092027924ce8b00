"""The benchmark's command line: where a run keeps its clusters' state."""

from __future__ import annotations

from pathlib import Path

import pytest

# The benchmark is not an installed package: it runs from the repository root.
from bench import cli


def test_a_run_keeps_its_state_in_the_cache_and_a_refused_one_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TFJOB_CACHE", str(tmp_path))
    assert cli.main(["--n", "0"]) == 2
    assert "every N must be at least 1" in capsys.readouterr().err
    assert list((tmp_path / "bench").iterdir()) == []
