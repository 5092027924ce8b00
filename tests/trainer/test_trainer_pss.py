"""ParameterServerStrategy on 127.0.0.1: chief + 2 workers + 1 ps, and an evaluator.

One job runs to completion (the coordinator's results, the evaluator following its
checkpoints, servers stopped by SIGTERM); a second loses its ps mid-training and is
resumed from the chief's checkpoint.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.trainer_processes import JobFactory, LocalJob, record_run

TIMEOUT = 420
SERVER_STOP_TIMEOUT = 15  # stops a hang; a server exits within a second of SIGTERM
PS_DEVICE = "/job:ps/"


@dataclass
class FinishedJob:
    job: LocalJob
    chief: dict[str, Any]
    evaluator: dict[str, Any]
    server_exit_codes: dict[str, int]


@pytest.fixture(scope="module")
def finished(local_jobs: JobFactory) -> FinishedJob:
    job = local_jobs(
        "pss",
        {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1},
        ["--eval-poll-seconds", "1", "--evaluator-timeout", "300", "--log-dir", "logs"],
    )
    started = time.monotonic()
    job.start_all()
    chief, evaluator = job.tasks["chief-0"], job.tasks["evaluator-0"]
    try:
        assert chief.wait(TIMEOUT) == 0, chief.tail()
        assert evaluator.wait(TIMEOUT) == 0, evaluator.tail()
        server_exit_codes = {}
        for name in ("worker-0", "worker-1", "ps-0"):
            server = job.tasks[name]
            assert server.poll() is None, f"{name} exited on its own\n{server.tail()}"
            server.signal(signal.SIGTERM)
            server_exit_codes[name] = server.wait(SERVER_STOP_TIMEOUT)
    finally:
        record_run("PSS chief + 2 workers + 1 ps + evaluator", job, started)
    (chief_result,) = chief.results()
    (evaluator_result,) = evaluator.results()
    return FinishedJob(job, chief_result, evaluator_result, server_exit_codes)


def test_chief_finishes_with_the_results_line(finished: FinishedJob) -> None:
    result = finished.chief
    assert result["task"] == {"type": "chief", "index": 0}
    assert result["strategy"] == "parameter-server"
    assert result["replicas"] == 2
    assert result["initial_epoch"] == 0
    assert result["epochs"] == 12
    assert result["accuracy"] >= result["accuracy_threshold"]
    model_dir = finished.job.workdir / "model"
    assert result["export"] == str(model_dir)
    assert (model_dir / "saved_model.pb").is_file()
    assert list((finished.job.workdir / "logs" / "train").glob("events.out.tfevents.*"))


def test_variables_live_on_the_ps(finished: FinishedJob) -> None:
    devices = finished.chief["variable_devices"] + finished.chief["optimizer_variable_devices"]
    assert devices
    assert all(device.startswith(PS_DEVICE) for device in devices), devices


def test_evaluator_evaluates_the_final_checkpoint_and_exits(finished: FinishedJob) -> None:
    result = finished.evaluator
    checkpoint_dir = finished.job.workdir / "ckpt"
    final = json.loads((checkpoint_dir / "final.json").read_text())
    assert result["task"] == {"type": "evaluator", "index": 0}
    assert result["checkpoint"] == str(checkpoint_dir / final["checkpoint"])
    assert result["checkpoint"] == finished.chief["checkpoint"]
    assert result["epochs"] == final["epoch"] == 12
    assert result["checkpoints_evaluated"] >= 1
    # The same weights on the same test split: the chief's own numbers.
    assert result["accuracy"] == finished.chief["accuracy"]
    assert result["loss"] == pytest.approx(finished.chief["loss"], rel=1e-5)
    assert list((finished.job.workdir / "logs" / "eval").glob("events.out.tfevents.*"))


def test_ps_and_workers_exit_143_on_sigterm(finished: FinishedJob) -> None:
    assert finished.server_exit_codes == {"worker-0": 143, "worker-1": 143, "ps-0": 143}


def test_lost_ps_is_retryable_and_the_chief_resumes_from_its_checkpoint(
    local_jobs: JobFactory,
) -> None:
    epochs = 8
    job = local_jobs("pss-lost-ps", {"chief": 1, "worker": 2, "ps": 1}, ["--epochs", str(epochs)])
    started = time.monotonic()
    job.start_all()
    chief = job.tasks["chief-0"]
    try:
        chief.wait_for_line(f"epoch 3/{epochs}", TIMEOUT)
        job.tasks["ps-0"].signal(signal.SIGKILL)
        assert chief.wait(TIMEOUT) == 42, chief.tail()
        assert "lost a peer" in chief.log
    finally:
        record_run("PSS: SIGKILL the ps in epoch 4", job, started)
    checkpoints = sorted(Path(job.workdir / "ckpt").glob("ckpt-*.index"))
    assert checkpoints, "the chief wrote no epoch checkpoint before the ps was lost"

    # The operator restarts the lost ps and the chief; the workers keep serving.
    started = time.monotonic()
    job.start("ps", 0)
    chief = job.start("chief", 0)
    try:
        assert chief.wait(TIMEOUT) == 0, chief.tail()
    finally:
        record_run("PSS: ps and chief restarted, to the end", job, started)
    (result,) = chief.results()
    assert result["initial_epoch"] >= 3
    assert result["epochs"] == epochs
    assert result["accuracy"] >= result["accuracy_threshold"]
