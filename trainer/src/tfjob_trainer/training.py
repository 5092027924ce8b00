"""The built-in workload: train the MLP under the strategy the context carries.

One flow for every training process: model replicas (MultiWorkerMirroredStrategy,
MirroredStrategy, the default strategy) and the ParameterServerStrategy coordinator.
They differ only in how they resume and checkpoint on SIGTERM:

- replicas resume from tf_keras' BackupAndRestore in `<checkpoint-dir>/backup`;
- the coordinator, the only process that saves under ParameterServerStrategy,
  resumes from the newest checkpoint in `<checkpoint-dir>`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import tensorflow as tf
import tf_keras

from tfjob_trainer import checkpoints, datasets
from tfjob_trainer.callbacks import EpochCheckpoint, ProgressLogger
from tfjob_trainer.checkpoints import CheckpointWriter
from tfjob_trainer.context import TrainingContext
from tfjob_trainer.model import build_model, evaluate, training_dataset_fn
from tfjob_trainer.preemption import PreemptionCheckpoint, ResumableBackup, StopSignal
from tfjob_trainer.strategy_choice import StrategyName
from tfjob_trainer.termination import TerminationWatch

logger = logging.getLogger(__name__)


def train(ctx: TrainingContext) -> dict[str, Any]:
    """Train, evaluate on the test split, export; return the results-line metrics."""
    options = ctx.options
    assert options.checkpoint_dir is not None, "parse_options requires it"
    coordinator = ctx.strategy_name == StrategyName.PARAMETER_SERVER
    split = datasets.load(
        options.dataset, seed=options.seed, synthetic_examples=options.synthetic_examples
    )
    steps_per_epoch = options.steps_per_epoch or math.ceil(split.num_train / ctx.global_batch_size)
    # Created outside the strategy scope: a local flag per process, never mirrored.
    stop = None if coordinator else StopSignal()
    with ctx.strategy.scope():
        model = build_model(options.hidden_units, options.learning_rate, stop)
        # Slots exist before a restore, so it restores them at once, not lazily.
        model.optimizer.build(model.trainable_variables)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    writer = CheckpointWriter(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch),
        options.checkpoint_dir,
        keep=options.keep_checkpoints,
        is_chief=ctx.is_chief,
    )
    label = f"{ctx.task_type} {ctx.task_index}"
    progress = ProgressLogger(
        epochs=options.epochs, global_batch_size=ctx.global_batch_size, label=label
    )
    watch = TerminationWatch()
    callbacks: list[tf_keras.callbacks.Callback] = [EpochCheckpoint(writer, epoch), progress]
    initial_epoch = 0
    if stop is None:
        # The coordinator resumes from its own checkpoints and saves on SIGTERM.
        if restored := writer.restore_latest():
            logger.info("restored %s (epoch %d)", restored, int(epoch.numpy()))
        initial_epoch = int(epoch.numpy())
        callbacks.append(PreemptionCheckpoint(writer, watch))
    else:
        # Replicas resume from the backup, found and restored inside fit().
        backup_dir = checkpoints.backup_dir(options.checkpoint_dir)
        callbacks.insert(
            0, ResumableBackup(backup_dir, steps_per_epoch=steps_per_epoch, watch=watch, stop=stop)
        )
    if ctx.is_chief:
        if initial_epoch < options.epochs:
            checkpoints.remove_final_marker(options.checkpoint_dir)
        if options.log_dir:
            callbacks.append(
                tf_keras.callbacks.TensorBoard(options.log_dir, profile_batch=0, write_graph=False)
            )

    print(
        f"[{label}] training {options.dataset}: strategy={ctx.strategy_name} "
        f"replicas={ctx.num_replicas} global_batch_size={ctx.global_batch_size} "
        f"steps_per_epoch={steps_per_epoch} epochs={options.epochs}",
        flush=True,
    )
    watch.install()
    model.fit(
        tf_keras.utils.experimental.DatasetCreator(
            training_dataset_fn(split, ctx.per_replica_batch_size, options.seed)
        ),
        epochs=options.epochs,
        initial_epoch=initial_epoch,
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        verbose=0,
    )
    replicas = None if coordinator else _local_replicas(ctx, split)
    return {**_finish(ctx, model, split, writer, progress, steps_per_epoch), **(replicas or {})}


def _local_replicas(ctx: TrainingContext, split: datasets.Split) -> dict[str, Any]:
    """This task's model replicas: their devices, and the batch each gets, measured by
    distributing the training input as fit does (the global batch split across them)."""
    strategy = ctx.strategy
    distributed = strategy.distribute_datasets_from_function(
        training_dataset_fn(split, ctx.per_replica_batch_size, ctx.options.seed)
    )
    features, _ = next(iter(distributed))
    try:
        devices = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one replica, on TensorFlow's first device
        first = tf.config.list_logical_devices("GPU")[:1] or tf.config.list_logical_devices()[:1]
        devices = [device.name for device in first]
    return {
        "replica_devices": devices,
        "replica_batch_sizes": [
            int(part.shape[0]) for part in strategy.experimental_local_results(features)
        ],
    }


def _finish(
    ctx: TrainingContext,
    model: tf_keras.Model,
    split: datasets.Split,
    writer: CheckpointWriter,
    progress: ProgressLogger,
    steps_per_epoch: int,
) -> dict[str, Any]:
    """Mark the final checkpoint, evaluate, export; the results-line metrics."""
    options = ctx.options
    assert options.checkpoint_dir is not None, "parse_options requires it"
    final_checkpoint = writer.latest if ctx.is_chief else None
    if final_checkpoint is not None:
        checkpoints.write_final_marker(options.checkpoint_dir, final_checkpoint, options.epochs)
    test = evaluate(model, split.test_x, split.test_y)
    print(
        f"[{ctx.task_type} {ctx.task_index}] test loss={test.loss:.4f} "
        f"accuracy={test.accuracy:.4f} examples={test.examples}",
        flush=True,
    )
    export = ctx.export_model(model)
    return {
        "loss": round(test.loss, 6),
        "accuracy": round(test.accuracy, 6),
        "examples_per_second": round(progress.examples_per_second, 1),
        "epochs": options.epochs,
        # No epoch began: the run resumed after its last epoch.
        "initial_epoch": (
            progress.initial_epoch if progress.initial_epoch is not None else options.epochs
        ),
        "initial_step": progress.initial_step or 0,
        "steps": progress.steps,
        "steps_per_epoch": steps_per_epoch,
        "global_batch_size": ctx.global_batch_size,
        "dataset": options.dataset,
        "train_loss": progress.last_logs.get("loss"),
        "train_accuracy": progress.last_logs.get("accuracy"),
        "checkpoint": final_checkpoint,
        "export": export,
        "variable_devices": sorted({variable.device for variable in model.variables}),
        "optimizer_variable_devices": sorted(
            {variable.device for variable in model.optimizer.variables}
        ),
    }
