"""Several model replicas per task on logical CPU devices (`--cpu-devices`), standing in
for several GPUs: MirroredStrategy in one task, MultiWorkerMirroredStrategy across tasks
of several devices each; and a task given GPUs that TensorFlow cannot see, refused."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from support.trainer_processes import TRAIN, JobFactory, record_run

TIMEOUT = 420


def test_one_task_of_one_device_trains_one_replica(local_jobs: JobFactory) -> None:
    """The default strategy (one task, no --cpu-devices): one replica, the whole batch."""
    job = local_jobs("default", {"worker": 1}, ["--epochs", "2"])
    (worker,) = job.start_all()
    assert worker.wait(TIMEOUT) == 0, worker.tail()
    (result,) = worker.results()
    assert result["strategy"] == "default"
    assert (result["replicas"], result["global_batch_size"]) == (1, 32)
    assert result["replica_batch_sizes"] == [32]
    assert [d.rsplit("/", 1)[1] for d in result["replica_devices"]] == ["device:CPU:0"]


def test_one_task_mirrors_over_three_logical_cpus(local_jobs: JobFactory) -> None:
    job = local_jobs("mirrored", {"chief": 1}, ["--cpu-devices", "3", "--epochs", "6"])
    started = time.monotonic()
    (chief,) = job.start_all()
    assert chief.wait(TIMEOUT) == 0, chief.tail()
    record_run("MirroredStrategy, 1 task x 3 logical CPUs", job, started)
    (result,) = chief.results()
    assert result["strategy"] == "mirrored"
    assert result["replicas"] == 3
    assert [d.rsplit("/", 1)[1] for d in result["replica_devices"]] == [
        "device:CPU:0",
        "device:CPU:1",
        "device:CPU:2",
    ]
    # The global batch is split: each replica gets --batch-size (32) of the 96.
    assert result["global_batch_size"] == 96
    assert result["replica_batch_sizes"] == [32, 32, 32]
    assert result["accuracy"] >= result["accuracy_threshold"]
    assert "devices: /cpu:0, /cpu:1, /cpu:2" in chief.log


def test_two_workers_of_two_logical_cpus_train_four_replicas_in_sync(
    local_jobs: JobFactory,
) -> None:
    job = local_jobs("mwms-devices", {"worker": 2}, ["--cpu-devices", "2", "--epochs", "8"])
    started = time.monotonic()
    workers = job.start_all()
    codes = [worker.wait(TIMEOUT) for worker in workers]
    record_run("MWMS 2 workers x 2 logical CPUs", job, started)
    assert codes == [0, 0], "\n".join(worker.tail() for worker in workers)
    first, second = (worker.results()[0] for worker in workers)
    for index, result in enumerate((first, second)):
        assert result["strategy"] == "multi-worker-mirrored"
        assert result["replicas"] == 4
        assert result["global_batch_size"] == 128
        assert result["replica_batch_sizes"] == [32, 32]
        assert [d.split("/")[-2:] for d in result["replica_devices"]] == [
            [f"task:{index}", "device:CPU:0"],
            [f"task:{index}", "device:CPU:1"],
        ]
        assert result["accuracy"] >= result["accuracy_threshold"]
    # All four replicas all-reduced every step: the same weights on both tasks.
    assert first["accuracy"] == second["accuracy"]
    assert first["loss"] == pytest.approx(second["loss"], rel=1e-5)


@pytest.mark.parametrize(
    ("environment", "fragment"),
    [
        ({"TFJOB_GPUS": "2"}, "the pod was given 2 GPU(s)"),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"}, "the pod was given 2 GPU(s)"),
    ],
)
def test_a_task_given_gpus_that_tensorflow_cannot_see_fails_at_start(
    tmp_path: object, environment: dict[str, str], fragment: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    done = subprocess.run(
        [TRAIN, "--model-dir", "model", "--checkpoint-dir", "ckpt"],
        env={**env, **environment},
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("tfjob-train: invalid")]
    assert fragment in line
    assert "TensorFlow sees none: this image has no CUDA libraries" in line
    assert "Traceback" not in done.stderr
