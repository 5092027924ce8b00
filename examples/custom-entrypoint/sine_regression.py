"""A user training function for `tfjob-train --entrypoint sine_regression:main`.

It fits y = sin(x) with a small MLP. tfjob-train has already validated TF_CONFIG,
configured the GPUs and created the distribution strategy; this function only has to
build its model under `ctx.strategy.scope()` and follow three multi-worker rules that
the context makes easy:

- every replica calls `fit` and `ctx.export_model` (both run collectives under
  MultiWorkerMirroredStrategy); only the chief's export lands in --model-dir;
- the input comes from a `DatasetCreator`, which works under every strategy,
  ParameterServerStrategy included, and shards the data per worker;
- `BackupAndRestore` under --checkpoint-dir lets a restarted group resume.

The returned dict becomes the process's `TFJOB_RESULT` line.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

EXAMPLES = 4096


def sine_dataset(context: tf.distribute.InputContext, global_batch_size: int) -> tf.data.Dataset:
    x = np.linspace(-math.pi, math.pi, EXAMPLES, dtype=np.float32).reshape(-1, 1)
    dataset = tf.data.Dataset.from_tensor_slices((x, np.sin(x)))
    dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
    batch_size = context.get_per_replica_batch_size(global_batch_size)
    return dataset.shuffle(EXAMPLES).repeat().batch(batch_size, drop_remainder=True)


def main(ctx: Any) -> dict[str, Any] | None:
    if ctx.task_type == "evaluator":
        print("sine_regression has no sidecar evaluation; nothing to do")
        return None

    with ctx.strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(1,)),
                keras.layers.Dense(32, activation="tanh"),
                keras.layers.Dense(32, activation="tanh"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.Adam(ctx.options.learning_rate), loss="mse")

    callbacks = []
    if ctx.checkpoint_dir:
        backup = os.path.join(ctx.checkpoint_dir, "backup")
        callbacks.append(keras.callbacks.BackupAndRestore(backup))

    steps_per_epoch = EXAMPLES // ctx.global_batch_size
    started = time.monotonic()
    history = model.fit(
        keras.utils.experimental.DatasetCreator(
            lambda context: sine_dataset(context, ctx.global_batch_size)
        ),
        epochs=ctx.options.epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        verbose=0,
    )
    seconds = time.monotonic() - started

    grid = np.linspace(-math.pi, math.pi, 256, dtype=np.float32).reshape(-1, 1)
    mse = float(np.mean((model(grid).numpy() - np.sin(grid)) ** 2))
    print(f"[{ctx.task_type} {ctx.task_index}] sine fit: mse={mse:.5f}", flush=True)

    export = ctx.export_model(model) if ctx.model_dir else None
    epochs_run = len(history.epoch)
    return {
        "loss": mse,
        "epochs": ctx.options.epochs,
        "initial_epoch": history.epoch[0] if history.epoch else ctx.options.epochs,
        "examples_per_second": epochs_run * steps_per_epoch * ctx.global_batch_size / seconds,
        "export": export,
        "is_chief": ctx.is_chief,
        "global_batch_size": ctx.global_batch_size,
    }
