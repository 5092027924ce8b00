"""Early runs: started once, in the background; their test gets what they wrote; one that
outlives its timeout, or the session, is interrupted as Ctrl-C would, then killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import early_runs
from support.early_runs import EarlyRun, EarlyRuns
from support.waiting import wait_until

#: Appends a line to started.log in its work directory, prints, and writes `interrupted`
#: there when it gets SIGINT (KeyboardInterrupt) while it sleeps for argv[2] seconds. The
#: log is written inside the `try`: a SIGINT sent once it is there is always caught.
SCRIPT = """
import sys, time
from pathlib import Path
work = Path(sys.argv[1])
try:
    print("out"); print("err", file=sys.stderr); sys.stdout.flush()
    with (work / "started.log").open("a") as log:
        log.write("started\\n")
    time.sleep(float(sys.argv[2]))
except KeyboardInterrupt:
    (work / "interrupted").write_text("yes")
    sys.exit(130)
"""
#: Ignores SIGINT, as a run stuck in its clean-up would; says so in ready.
STUBBORN = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.SIG_IGN)
(Path(sys.argv[1]) / "ready").write_text("")
time.sleep(60)
"""


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT, as a shell's background job does (`make test &`): its
    children inherit that."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sleeper(name: str, seconds: float, timeout: float = 60) -> EarlyRun:
    return EarlyRun(
        name, lambda work: [sys.executable, "-c", SCRIPT, str(work), str(seconds)], timeout
    )


def runs_in(tmp_path: Path) -> EarlyRuns:
    def work_dir(name: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        return path

    return EarlyRuns(work_dir)


def test_a_run_started_early_is_started_once_and_gives_its_test_what_it_wrote(
    tmp_path: Path,
) -> None:
    run = sleeper("quick", 0)
    runs = runs_in(tmp_path)
    runs.start([run])
    runs.start([run])
    finished = runs.started(run).wait()
    assert finished.returncode == 0
    assert (finished.stdout, finished.stderr) == ("out\n", "err\n")
    assert finished.work_dir == tmp_path / "quick"
    assert (finished.work_dir / "started.log").read_text() == "started\n"


def test_a_run_nothing_started_starts_when_its_test_asks(tmp_path: Path) -> None:
    run = sleeper("alone", 0)
    finished = runs_in(tmp_path).started(run).wait()
    assert finished.returncode == 0


@pytest.mark.usefixtures("sigint_ignored")
def test_a_run_past_its_timeout_is_interrupted_and_its_test_fails(tmp_path: Path) -> None:
    run = sleeper("slow", 60, timeout=1)
    started = runs_in(tmp_path).started(run)
    # Python handles SIGINT only once it has started: on a loaded machine, later than 1 s.
    wait_until(lambda: (tmp_path / "slow" / "started.log").exists(), 30, "the run to start")
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait()
    assert started.process.returncode == 130
    assert (tmp_path / "slow" / "interrupted").read_text() == "yes"


@pytest.mark.usefixtures("sigint_ignored")
def test_the_session_end_interrupts_a_run_still_going_and_kills_one_that_ignores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(early_runs, "STOP_GRACE_SECONDS", 0.5)
    polite = sleeper("polite", 60)
    stubborn = EarlyRun("stubborn", lambda work: [sys.executable, "-c", STUBBORN, str(work)], 60)
    runs = runs_in(tmp_path)
    runs.start([polite, stubborn])
    # Both must be in their sleep (the stubborn one ignoring SIGINT) when the session ends.
    wait_until(
        lambda: all((tmp_path / n).exists() for n in ("polite/started.log", "stubborn/ready")),
        30,
        "both runs to start",
        interval=0.05,
    )
    runs.stop_all()
    assert (tmp_path / "polite" / "interrupted").read_text() == "yes"
    assert runs.started(stubborn).process.returncode == -9
