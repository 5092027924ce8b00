"""Keras callbacks of the built-in workload: progress lines and epoch checkpoints.

Callbacks here set `_supports_tf_logs = True` (tf_keras' flag): otherwise Keras turns
every batch's logs into NumPy, which under ParameterServerStrategy waits for each
remote step and serialises the asynchronous workers.
"""

from __future__ import annotations

import time
from typing import Any

import tensorflow as tf
import tf_keras

from tfjob_trainer.checkpoints import CheckpointWriter


class ProgressLogger(tf_keras.callbacks.Callback):
    """Prints one line per epoch and measures throughput.

    Throughput leaves out the first step, which traces and compiles the step function.
    """

    def __init__(self, *, epochs: int, global_batch_size: int, label: str) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._epochs = epochs
        self._global_batch_size = global_batch_size
        self._label = label
        self.initial_epoch: int | None = None
        self.initial_step: int | None = None
        self.steps = 0
        self.last_logs: dict[str, float] = {}
        self._warm_since: float | None = None
        self._finished: float | None = None
        self._epoch_started = 0.0
        self._epoch_steps = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.initial_epoch is None:
            self.initial_epoch = int(epoch)
        self._epoch_started = time.monotonic()
        self._epoch_steps = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.initial_step is None:
            self.initial_step = int(batch)
            epoch = self.initial_epoch or 0
            if epoch or self.initial_step:
                print(
                    f"[{self._label}] resumed at epoch {epoch + 1}, step {self.initial_step}",
                    flush=True,
                )

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.steps += 1
        self._epoch_steps += 1
        if self.steps == 1:
            self._warm_since = time.monotonic()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        values = {key: float(value) for key, value in (logs or {}).items()}
        self.last_logs = values
        seconds = time.monotonic() - self._epoch_started
        rate = self._epoch_steps * self._global_batch_size / seconds if seconds > 0 else 0.0
        metrics = " ".join(f"{key}={value:.4f}" for key, value in sorted(values.items()))
        print(
            f"[{self._label}] epoch {epoch + 1}/{self._epochs} {metrics} "
            f"steps={self._epoch_steps} examples_per_second={rate:.1f}",
            flush=True,
        )

    def on_train_end(self, logs: Any = None) -> None:
        self._finished = time.monotonic()

    @property
    def examples_per_second(self) -> float:
        if self._warm_since is None or self._finished is None or self.steps < 2:
            return 0.0
        seconds = self._finished - self._warm_since
        return (self.steps - 1) * self._global_batch_size / seconds if seconds > 0 else 0.0


class EpochCheckpoint(tf_keras.callbacks.Callback):
    """After each epoch: record the completed epochs, then write a checkpoint.

    The checkpoint is numbered by the optimizer's global step, TensorFlow's convention,
    so a mid-epoch checkpoint (written on SIGTERM) never collides with an epoch one.
    """

    def __init__(self, writer: CheckpointWriter, epoch: tf.Variable) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._writer = writer
        self._epoch = epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._epoch.assign(epoch + 1)
        self._writer.save(int(self.model.optimizer.iterations.numpy()))
