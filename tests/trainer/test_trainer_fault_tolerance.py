"""MultiWorkerMirroredStrategy fault tolerance, one 2-worker job through three runs:

1. worker 1 gets SIGTERM in epoch 3: both workers write the backup at the same step
   and exit 42 (retryable);
2. the whole group is restarted: it resumes at the step after that backup; worker 1 is
   then SIGKILLed in epoch 6: worker 0 must exit 42, not 1;
3. the whole group is restarted again: it resumes from the last epoch-end backup and
   finishes above the accuracy threshold.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass

import pytest
from support.trainer_processes import JobFactory, LocalJob, Task, record_run

TIMEOUT = 420
EPOCHS = 8
SIGTERM_BACKUP = re.compile(r"SIGTERM: backup written at epoch (\d+), step (\d+)")
RESUMED = re.compile(r"resumed at epoch (\d+), step (\d+)")


@dataclass
class Runs:
    job: LocalJob
    preempted: list[Task]
    backup_after_preemption: list[str]
    killed: list[Task]
    finished: list[Task]


def run_group(job: LocalJob, title: str, interrupt: tuple[str, int] | None) -> list[Task]:
    """Start both workers; after the given log line, send the given signal to worker 1."""
    started = time.monotonic()
    workers = job.start_all()
    try:
        if interrupt is not None:
            after_line, signum = interrupt
            workers[1].wait_for_line(after_line, TIMEOUT)
            workers[1].signal(signum)
        for worker in workers:
            worker.wait(TIMEOUT)
    finally:
        record_run(title, job, started)
    return workers


@pytest.fixture(scope="module")
def runs(local_jobs: JobFactory) -> Runs:
    job = local_jobs("mwms-faults", {"worker": 2}, ["--epochs", str(EPOCHS)])
    preempted = run_group(
        job, "MWMS: SIGTERM worker 1 in epoch 3", (f"epoch 2/{EPOCHS}", signal.SIGTERM)
    )
    backup = job.workdir / "ckpt" / "backup" / "chief"
    backup_files = sorted(path.name for path in backup.iterdir()) if backup.is_dir() else []
    killed = run_group(
        job,
        "MWMS: group restart, SIGKILL worker 1 in epoch 6",
        (f"epoch 5/{EPOCHS}", signal.SIGKILL),
    )
    finished = run_group(job, "MWMS: group restart after SIGKILL, to the end", None)
    return Runs(job, preempted, backup_files, killed, finished)


def sigterm_position(runs: Runs) -> tuple[int, int]:
    """(epoch counted from 1, step) of the SIGTERM backup, as worker 0 logged it."""
    backup = SIGTERM_BACKUP.search(runs.preempted[0].log)
    assert backup, runs.preempted[0].tail()
    epoch, step = backup.groups()
    return int(epoch), int(step)


def test_sigterm_writes_a_backup_and_every_worker_exits_retryable(runs: Runs) -> None:
    positions = set()
    for worker in runs.preempted:
        assert worker.returncode == 42, worker.tail()
        backup = SIGTERM_BACKUP.search(worker.log)
        assert backup, worker.tail()
        positions.add(backup.groups())
        assert worker.results() == []
        assert "Traceback" not in worker.log
    assert "SIGTERM received" in runs.preempted[1].log
    # Both replicas stopped after the same step and wrote the backup there together.
    assert len(positions) == 1
    assert "checkpoint" in runs.backup_after_preemption
    assert any(name.endswith(".index") for name in runs.backup_after_preemption)


def test_restart_resumes_at_the_step_after_the_sigterm_backup(runs: Runs) -> None:
    epoch, step = sigterm_position(runs)
    for worker in runs.killed:
        resumed = RESUMED.search(worker.log)
        assert resumed, worker.tail()
        assert (int(resumed.group(1)), int(resumed.group(2))) in {
            (epoch, step + 1),
            (epoch + 1, 0),  # the backup was at an epoch's last step
        }
        assert f"epoch 1/{EPOCHS}" not in worker.log


def test_surviving_worker_exits_retryable_when_its_peer_is_killed(runs: Runs) -> None:
    survivor, victim = runs.killed
    assert victim.returncode == -signal.SIGKILL
    assert survivor.returncode == 42, survivor.tail()
    assert "lost a peer" in survivor.log
    assert "Traceback" not in survivor.log
    assert survivor.results() == []


def test_group_restart_after_sigkill_resumes_from_the_backup_and_finishes(runs: Runs) -> None:
    for worker in runs.finished:
        assert worker.returncode == 0, worker.tail()
        (result,) = worker.results()
        # Killed in epoch 6: the backup written at the end of epoch 5 is where it resumes.
        assert result["initial_epoch"] >= 5
        assert result["initial_step"] == 0
        assert result["epochs"] == EPOCHS
        assert result["accuracy"] >= result["accuracy_threshold"]
    assert not (runs.job.workdir / "ckpt" / "backup" / "chief").exists()
