"""Run state directories: a killed run's is removed by the next run, a live run's is left
alone, a failed run's is kept without its images, and only the newest few are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfjob_localcluster.host import statedirs

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TFJOB_CACHE", str(tmp_path))
    return tmp_path


def run_in_another_process(body: str) -> subprocess.Popen[str]:
    """A run in a process of its own: prints its state dir, then waits for stdin to close."""
    code = "\n".join(
        [
            "import sys",
            "from tfjob_localcluster.host import statedirs",
            body,
            "print(directory, flush=True)",
            "sys.stdin.read()",
        ]
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def state_dir_printed(run: subprocess.Popen[str]) -> Path:
    """The state dir a run printed; a run that died first fails the test here, before a
    relative path of nothing could point the test into its working directory."""
    assert run.stdout is not None
    line = run.stdout.readline().strip()
    assert line, f"the run exited with {run.wait()} before printing its state dir"
    return Path(line)


def with_image_stores(directory: Path) -> None:
    for store in ("cluster/node/var-lib/containerd/blobs", "registry/data/blobs"):
        (directory / store).mkdir(parents=True)
        (directory / store / "layer").write_bytes(b"x" * 1024)
    (directory / "cluster/logs").mkdir(parents=True)
    (directory / "cluster/logs/kubelet.log").write_text("the diagnosis\n")


def test_a_killed_runs_directory_goes_a_live_runs_stays(cache: Path) -> None:
    live = run_in_another_process('directory = statedirs.new_state_dir("runs", "session-")')
    killed = run_in_another_process('directory = statedirs.new_state_dir("runs", "session-")')
    live_dir = state_dir_printed(live)
    killed_dir = state_dir_printed(killed)
    with_image_stores(killed_dir)
    killed.kill()
    killed.wait()
    try:
        mine = statedirs.new_state_dir("runs", "session-")
        assert not killed_dir.exists()
        assert live_dir.is_dir()
        assert mine.is_dir()
        assert mine.stat().st_mode & 0o777 == 0o700
    finally:
        live.communicate("")
    statedirs.remove(mine)
    assert not mine.exists()


def test_a_failed_runs_directory_keeps_its_logs_not_its_images(cache: Path) -> None:
    failed = run_in_another_process(
        'directory = statedirs.new_state_dir("runs", "session-")\n'
        "(directory / 'cluster/node/var-lib/containerd').mkdir(parents=True)\n"
        "(directory / 'cluster/logs').mkdir(parents=True)\n"
        "(directory / 'cluster/logs/kubelet.log').write_text('the diagnosis')\n"
        "statedirs.keep(directory)"
    )
    kept = state_dir_printed(failed)
    failed.communicate("")
    assert (kept / "cluster/logs/kubelet.log").read_text() == "the diagnosis"
    assert not (kept / "cluster/node/var-lib/containerd").exists()
    statedirs.new_state_dir("runs", "session-")
    assert (kept / "cluster/logs/kubelet.log").exists(), "the next run keeps what failed"


def test_only_the_newest_kept_directories_stay(cache: Path) -> None:
    kept = []
    for age in range(statedirs.KEPT_AT_MOST + 2):
        directory = cache / "runs" / f"session-old{age}"
        with_image_stores(directory)
        (directory / statedirs.OWNER).touch()
        (directory / statedirs.KEPT).touch()
        then = time.time() - 3600 * (age + 1)
        os.utime(directory / statedirs.KEPT, (then, then))
        kept.append(directory)
    removed = statedirs.sweep(cache / "runs", "session-")
    assert sorted(removed) == sorted(kept[statedirs.KEPT_AT_MOST :])
    for directory in kept[: statedirs.KEPT_AT_MOST]:
        assert (directory / "cluster/logs/kubelet.log").exists()
        assert not (directory / "registry/data").exists()


def test_a_directory_being_made_is_not_taken_for_a_killed_runs(cache: Path) -> None:
    making = cache / "runs" / "session-new"
    making.mkdir(parents=True)
    assert statedirs.sweep(cache / "runs", "session-") == []
    old = time.time() - 2 * statedirs.MAKING
    os.utime(making, (old, old))
    assert statedirs.sweep(cache / "runs", "session-") == [making]
