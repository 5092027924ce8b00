"""MultiWorkerMirroredStrategy, 2 workers on 127.0.0.1, built-in digits with default flags."""

from __future__ import annotations

import json
import time

import pytest
from support.trainer_processes import JobFactory, record_run

TIMEOUT = 420
#: Threads a worker of this job may hold at once (124 measured with the default flags).
MAX_THREADS = 400


def test_two_workers_reach_the_threshold_and_only_the_chief_exports(
    local_jobs: JobFactory,
) -> None:
    job = local_jobs("mwms", {"worker": 2}, [])
    model_dirs = [job.workdir / "model-0", job.workdir / "model-1"]
    started = time.monotonic()
    workers = [
        job.start("worker", index, ["--model-dir", str(model_dirs[index])]) for index in (0, 1)
    ]
    codes = job.wait_all(workers, TIMEOUT)
    record_run("MWMS 2 workers, digits, default flags", job, started)
    assert codes == [0, 0], "\n".join(worker.tail() for worker in workers)
    # A pod's PID limit (often 1024) counts threads: with TensorFlow's collective timeout
    # at 300 s, each worker of this job held about 4,700.
    assert max(worker.peak_threads for worker in workers) < MAX_THREADS

    results = [worker.results() for worker in workers]
    assert [len(lines) for lines in results] == [1, 1], "\n".join(w.tail() for w in workers)
    chief_result, other_result = results[0][0], results[1][0]
    for index, result in enumerate((chief_result, other_result)):
        assert result["task"] == {"type": "worker", "index": index}
        assert result["strategy"] == "multi-worker-mirrored"
        assert result["replicas"] == 2
        assert result["global_batch_size"] == 64
        assert result["initial_epoch"] == 0
        assert result["epochs"] == 12
        assert result["examples_per_second"] > 0
        assert result["accuracy"] >= result["accuracy_threshold"] == 0.9
    # Synchronous training: both replicas end with the same weights, hence the same
    # test metrics on the same split.
    assert other_result["accuracy"] == chief_result["accuracy"]
    assert other_result["loss"] == pytest.approx(chief_result["loss"], rel=1e-5)

    assert chief_result["export"] == str(model_dirs[0])
    assert (model_dirs[0] / "saved_model.pb").is_file()
    assert other_result["export"] is None
    assert not model_dirs[1].exists()
    # The non-chief's temporary checkpoint and export copies are gone.
    assert list(job.scratch_dir("worker-1").iterdir()) == []

    checkpoint_dir = job.workdir / "ckpt"
    final = json.loads((checkpoint_dir / "final.json").read_text())
    assert final["epoch"] == 12
    assert str(checkpoint_dir / final["checkpoint"]) == chief_result["checkpoint"]
    assert (checkpoint_dir / f"{final['checkpoint']}.index").is_file()
    # BackupAndRestore removes its state once training completes.
    assert not (checkpoint_dir / "backup" / "chief").exists()
