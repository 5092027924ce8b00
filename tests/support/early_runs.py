"""Harness runs that start in the background before their tests, which then wait for them.

The chaos run and the benchmark's smoke run each start clusters of their own and spend
most of their minutes waiting (the gaps between faults, the settling, kwok's pods): in a
warm `make test` the machine's two cores were 15 to 30 % busy through them. A test marks
its run with `@pytest.mark.early_run(EarlyRun(...))`; `tests/conftest.py` starts the
marked runs of a stream (support/streams.py) when that stream's first test of a folder
that may share the host with other clusters begins (`start`), so the runs overlap the
tests before theirs; the test's `early_run` fixture waits for its own (starting it then
if nothing did, as when the test runs alone) and returns what it wrote.

Each run is its own process group. One still running when the session ends (its test
failed before waiting, or the run was interrupted) gets SIGINT, as Ctrl-C would send, so
that it tears its clusters down, and is killed if it has not exited two minutes later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.checkout import ROOT

#: How long a run has to exit after SIGINT before it is killed.
STOP_GRACE_SECONDS = 120


@dataclass(frozen=True)
class EarlyRun:
    """A harness command, given its own work directory."""

    name: str
    command: Callable[[Path], list[str]]
    timeout: float  # from its start


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    work_dir: Path


class Started:
    """A run's process, its output going to files in its work directory."""

    def __init__(self, run: EarlyRun, work_dir: Path) -> None:
        self.run = run
        self.work_dir = work_dir
        self._stdout = work_dir / "stdout"
        self._stderr = work_dir / "stderr"
        with self._stdout.open("wb") as out, self._stderr.open("wb") as err:
            self.process = subprocess.Popen(
                # A shell starts a background job (`make test &`, a CI runner's step) with
                # SIGINT ignored, which its children inherit: the run gets the default back,
                # so that SIGINT stops it as Ctrl-C would.
                ["env", "--default-signal=INT", *run.command(work_dir)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def wait(self) -> Finished:
        """Its result; raises subprocess.TimeoutExpired, after stopping it, if it outlives
        its timeout."""
        remaining = self.run.timeout - (time.monotonic() - self.started_at)
        try:
            self.process.wait(timeout=max(remaining, 0))
        except subprocess.TimeoutExpired:
            self.stop()
            raise subprocess.TimeoutExpired(
                self.process.args, self.run.timeout, self._read(self._stdout)
            ) from None
        return Finished(
            self.process.returncode,
            self._read(self._stdout),
            self._read(self._stderr),
            self.work_dir,
        )

    def stop(self) -> None:
        """SIGINT to its process group, then SIGKILL if it is still there after the grace."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @staticmethod
    def _read(path: Path) -> str:
        return path.read_text(errors="replace")


class EarlyRuns:
    """The session's runs, each started at most once."""

    def __init__(self, work_dir: Callable[[str], Path]) -> None:
        self._work_dir = work_dir
        self._started: dict[str, Started] = {}

    def start(self, runs: Iterable[EarlyRun]) -> None:
        for run in runs:
            self.started(run)

    def started(self, run: EarlyRun) -> Started:
        if run.name not in self._started:
            self._started[run.name] = Started(run, self._work_dir(run.name))
        return self._started[run.name]

    def stop_all(self) -> None:
        for started in self._started.values():
            started.stop()


def marked_run(item: pytest.Item) -> EarlyRun | None:
    marker = item.get_closest_marker("early_run")
    if marker is None:
        return None
    run = marker.args[0]
    assert isinstance(run, EarlyRun), f"{item.nodeid}: early_run takes an EarlyRun"
    return run


@pytest.fixture(scope="session")
def early_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EarlyRuns]:
    """The session's runs, stopped at its end if still going."""
    runs = EarlyRuns(tmp_path_factory.mktemp)
    try:
        yield runs
    finally:
        runs.stop_all()


@pytest.fixture
def early_run(request: pytest.FixtureRequest, early_runs: EarlyRuns) -> Finished:
    """The test's marked run, finished."""
    run = marked_run(request.node)
    assert run is not None, f"{request.node.nodeid} uses early_run without the marker"
    return early_runs.started(run).wait()
