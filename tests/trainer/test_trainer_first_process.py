"""tfjob-train as the first process of its PID namespace, as a container runs it
(tfjob_trainer.init): a SIGTERM before its role has begun ends it at once, even where
TensorFlow has taken SIGTERM for itself and holds the interpreter (waiting for its
peers); once training has begun, the SIGTERM is the trainer's, which writes its backup
and exits 42."""

from __future__ import annotations

import signal

from support.trainer_processes import JobFactory

EPOCHS = 40


def test_a_worker_waiting_for_a_peer_that_never_comes_goes_at_once_on_sigterm(
    local_jobs: JobFactory,
) -> None:
    job = local_jobs("first-process-waiting", {"worker": 2}, [])
    worker = job.start("worker", 1, first_process=True)
    try:
        # TensorFlow has joined the cluster, catches SIGTERM itself and waits for worker 0.
        worker.wait_for_line("still waiting for its peers", 120)
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 128 + signal.SIGTERM, worker.tail()
    finally:
        job.stop_all()


def test_once_training_has_begun_sigterm_is_the_trainers(local_jobs: JobFactory) -> None:
    job = local_jobs("first-process-training", {"worker": 1}, ["--epochs", str(EPOCHS)])
    worker = job.start("worker", 0, first_process=True)
    try:
        worker.wait_for_line(f"epoch 2/{EPOCHS}", 180)
        worker.signal(signal.SIGTERM)
        assert worker.wait(120) == 42, worker.tail()
        assert "SIGTERM: backup written at epoch" in worker.log, worker.tail()
    finally:
        job.stop_all()
