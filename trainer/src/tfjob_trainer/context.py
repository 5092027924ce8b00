"""What a training function receives: `main(ctx)` for the built-in workload and for
user entry points (`tfjob-train --entrypoint mypkg.train:main`).

The strategy is already created when the function runs (so it may build models under
`ctx.strategy.scope()` right away); TF_CONFIG is validated; GPU memory is configured.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfjob_trainer.checkpoints import scratch_dir
from tfjob_trainer.options import TrainerOptions
from tfjob_trainer.results import ACCURACY_THRESHOLD
from tfjob_trainer.strategy_choice import StrategyName
from tfjob_trainer.tf_config import TFConfig

_METRIC_KEYS = ("loss", "accuracy", "examples_per_second", "epochs", "initial_epoch")


@dataclass(frozen=True)
class TrainingContext:
    """Everything a training function needs to behave correctly in a TFJob.

    Attributes:
        task_type, task_index: this task, as in TF_CONFIG ("chief" 0 without TF_CONFIG).
        is_chief: True on the one task that writes checkpoints, exports and summaries
            (the chief, or worker 0 when there is no chief).
        model_dir, checkpoint_dir, log_dir: the flags, absolute (None when not given).
        strategy: the created tf.distribute strategy; strategy_name its flag value.
        num_replicas: model replicas training together (see results.py).
        per_replica_batch_size: --batch-size.
        global_batch_size: examples per synchronous step across all replicas.
        cluster_resolver: a tf.distribute ClusterResolver for this task.
        tf_config: the validated TF_CONFIG; options: all parsed flags.
        started_at: time.monotonic() when the process started.
    """

    task_type: str
    task_index: int
    is_chief: bool
    model_dir: str | None
    checkpoint_dir: str | None
    log_dir: str | None
    strategy: tf.distribute.Strategy
    strategy_name: StrategyName
    num_replicas: int
    per_replica_batch_size: int
    global_batch_size: int
    cluster_resolver: Any
    tf_config: TFConfig
    options: TrainerOptions
    started_at: float

    @contextmanager
    def write_dir(self, path: str) -> Iterator[str]:
        """Where this task writes something every worker must save collectively.

        The chief gets `path`; other workers a scratch directory removed on exit.
        """
        if self.is_chief:
            tf.io.gfile.makedirs(path)
            yield path
        else:
            with scratch_dir(prefix=f"tfjob-{self.task_type}-{self.task_index}-") as scratch:
                yield scratch

    def export_model(self, model: Any) -> str | None:
        """Save `model` as a SavedModel in model_dir on the chief; return that path.

        Every replica must call this (saving runs collectives under
        MultiWorkerMirroredStrategy); non-chiefs write to scratch and return None.
        """
        if self.model_dir is None:
            raise ValueError("export_model needs --model-dir")
        with self.write_dir(self.model_dir) as directory:
            model.save(directory, save_format="tf", include_optimizer=False)
        return self.model_dir if self.is_chief else None

    def result_fields(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The results line for `metrics`, with this task's standard keys.

        Metric keys the function did not return are null; the keys that describe the
        task (task, strategy, replicas, wall_seconds, accuracy_threshold) are always
        this context's.
        """
        fields: dict[str, Any] = dict.fromkeys(_METRIC_KEYS)
        fields.update(metrics)
        fields.update(
            task={"type": self.task_type, "index": self.task_index},
            strategy=self.strategy_name.value,
            replicas=self.num_replicas,
            accuracy_threshold=ACCURACY_THRESHOLD,
            wall_seconds=round(time.monotonic() - self.started_at, 3),
        )
        return fields
