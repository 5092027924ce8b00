"""The built-in model (an MLP in tf_keras), its input pipeline and its test metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from tfjob_trainer.datasets import NUM_CLASSES, NUM_FEATURES, Split
from tfjob_trainer.preemption import StopSignal

EVAL_CHUNK = 4096


@dataclass(frozen=True)
class Metrics:
    loss: float
    accuracy: float
    examples: int
    seconds: float


class StopAwareModel(tf_keras.Model):
    """A functional model whose training step also all-reduces a StopSignal."""

    def __init__(self, *args: Any, stop: StopSignal, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = stop

    def train_step(self, data: Any) -> Any:
        logs = super().train_step(data)
        replica = tf.distribute.get_replica_context()
        self._stop.agreed.assign(
            replica.all_reduce(tf.distribute.ReduceOp.SUM, self._stop.requested.read_value())
        )
        return logs


def build_model(
    hidden_units: tuple[int, ...], learning_rate: float, stop: StopSignal | None = None
) -> tf_keras.Model:
    """A compiled MLP; call it inside `strategy.scope()` so variables are distributed.

    With `stop`, every training step also agrees on it across replicas (for
    checkpoint-on-SIGTERM under the synchronous strategies).
    """
    inputs = tf_keras.Input(shape=(NUM_FEATURES,), name="features")
    hidden = inputs
    for units in hidden_units:
        hidden = tf_keras.layers.Dense(units, activation="relu")(hidden)
    logits = tf_keras.layers.Dense(NUM_CLASSES, name="logits")(hidden)
    if stop is None:
        model = tf_keras.Model(inputs, logits, name="mlp")
    else:
        model = StopAwareModel(inputs, logits, name="mlp", stop=stop)
    model.compile(
        optimizer=tf_keras.optimizers.Adam(learning_rate=learning_rate),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


def training_dataset_fn(
    split: Split, per_replica_batch: int, seed: int
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A dataset_fn for DatasetCreator: each input pipeline reads its own shard.

    Under MultiWorkerMirroredStrategy there is one pipeline per worker; under
    ParameterServerStrategy one per worker too, created on the worker itself.
    """

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((split.train_x, split.train_y))
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        shard_size = -(-split.num_train // context.num_input_pipelines)
        return (
            dataset.shuffle(shard_size, seed=seed + context.input_pipeline_id)
            .repeat()
            .batch(per_replica_batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )

    return dataset_fn


def evaluate(model: tf_keras.Model, x: np.ndarray, y: np.ndarray) -> Metrics:
    """Loss and accuracy over the whole test split with plain forward passes.

    No distributed evaluation: every replica holds the same weights, so each computes
    the same numbers from the same split without collectives, which keeps the result
    exact (no padded or dropped batches) and lets any one task evaluate alone.
    """
    started = time.monotonic()
    loss_sum = 0.0
    correct = 0
    for start in range(0, len(y), EVAL_CHUNK):
        logits = model(x[start : start + EVAL_CHUNK], training=False)
        labels = y[start : start + EVAL_CHUNK]
        losses = tf_keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        loss_sum += float(tf.reduce_sum(losses))
        correct += int(np.sum(np.argmax(logits.numpy(), axis=1) == labels))
    return Metrics(
        loss=loss_sum / len(y),
        accuracy=correct / len(y),
        examples=len(y),
        seconds=time.monotonic() - started,
    )
