"""A user entry point (the documented example) and an evaluator whose chief never comes."""

from __future__ import annotations

import time

import pytest
from support.checkout import ROOT
from support.trainer_processes import JobFactory, record_run

TIMEOUT = 300
EXAMPLE_DIR = ROOT / "examples" / "custom-entrypoint"


def test_example_entrypoint_trains_with_the_prepared_context(
    local_jobs: JobFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLE_DIR))
    job = local_jobs(
        "entrypoint",
        {"chief": 1},
        ["--entrypoint", "sine_regression:main", "--epochs", "3", "--learning-rate", "0.01"],
    )
    started = time.monotonic()
    chief = job.start("chief")
    try:
        assert chief.wait(TIMEOUT) == 0, chief.tail()
    finally:
        record_run("entry point sine_regression:main, one process", job, started)
    (result,) = chief.results()
    assert result["task"] == {"type": "chief", "index": 0}
    assert result["strategy"] == "default"
    assert result["replicas"] == 1
    assert result["is_chief"] is True
    assert result["global_batch_size"] == 32
    assert result["initial_epoch"] == 0
    assert result["accuracy"] is None  # a regression: the example reports no accuracy
    assert result["loss"] < 0.05  # mean squared error of sin(x); an untrained net is ~0.5
    assert (job.workdir / "model" / "saved_model.pb").is_file()


def test_evaluator_without_checkpoints_gives_up_with_a_retryable_exit(
    local_jobs: JobFactory,
) -> None:
    job = local_jobs(
        "lonely-evaluator",
        {"chief": 1, "worker": 1, "evaluator": 1},
        ["--evaluator-timeout", "2", "--eval-poll-seconds", "0.5"],
    )
    started = time.monotonic()
    evaluator = job.start("evaluator")
    try:
        assert evaluator.wait(TIMEOUT) == 42, evaluator.tail()
    finally:
        record_run("evaluator with no chief, --evaluator-timeout 2", job, started)
    assert "no new checkpoint" in evaluator.log
    assert "Traceback" not in evaluator.log
    assert evaluator.results() == []
