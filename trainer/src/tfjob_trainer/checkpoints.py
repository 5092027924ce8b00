"""The layout of --checkpoint-dir, shared by the trainer and the evaluator.

    <checkpoint-dir>/
      checkpoint            TensorFlow's index of the kept checkpoints
      ckpt-<step>.*         model, optimizer and completed-epoch count, numbered by
                            global step; written by the chief after every epoch (and,
                            under ParameterServerStrategy, on SIGTERM)
      final.json            {"checkpoint": "ckpt-<step>", "epoch": N}: the chief's
                            marker that training finished and which checkpoint is last
      backup/chief/         MultiWorkerMirroredStrategy's BackupAndRestore state,
                            removed when training completes

Paths may be local or any filesystem TensorFlow reads (gs://, s3://), hence tf.io.gfile.
Multi-worker jobs need the directory on storage that every task sees.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import tensorflow as tf

BACKUP_SUBDIR = "backup"
FINAL_MARKER = "final.json"
CHECKPOINT_PREFIX = "ckpt"


@dataclass(frozen=True)
class FinalMarker:
    checkpoint: str  # a path, made absolute under the checkpoint dir
    epoch: int


def backup_dir(checkpoint_dir: str) -> str:
    return os.path.join(checkpoint_dir, BACKUP_SUBDIR)


def write_final_marker(checkpoint_dir: str, checkpoint_path: str, epoch: int) -> None:
    """Atomically record that `checkpoint_path` is the last checkpoint of training."""
    marker = os.path.join(checkpoint_dir, FINAL_MARKER)
    staging = marker + ".tmp"
    document = {"checkpoint": os.path.basename(checkpoint_path), "epoch": epoch}
    with tf.io.gfile.GFile(staging, "w") as handle:
        handle.write(json.dumps(document) + "\n")
    tf.io.gfile.rename(staging, marker, overwrite=True)


def read_final_marker(checkpoint_dir: str) -> FinalMarker | None:
    marker = os.path.join(checkpoint_dir, FINAL_MARKER)
    if not tf.io.gfile.exists(marker):
        return None
    with tf.io.gfile.GFile(marker) as handle:
        document = json.loads(handle.read())
    return FinalMarker(
        checkpoint=os.path.join(checkpoint_dir, document["checkpoint"]),
        epoch=int(document["epoch"]),
    )


def remove_final_marker(checkpoint_dir: str) -> None:
    """Called by the chief before training, so a marker never outlives its run."""
    marker = os.path.join(checkpoint_dir, FINAL_MARKER)
    if tf.io.gfile.exists(marker):
        tf.io.gfile.remove(marker)


@contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A local directory for a non-chief's share of a collective save, then removed.

    Under MultiWorkerMirroredStrategy every worker must take part in a save, but only
    the chief's copy is kept.
    """
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class CheckpointWriter:
    """Writes epoch checkpoints: the chief into --checkpoint-dir, others to scratch."""

    def __init__(
        self, checkpoint: tf.train.Checkpoint, directory: str, *, keep: int, is_chief: bool
    ) -> None:
        self._checkpoint = checkpoint
        self._is_chief = is_chief
        self._manager = tf.train.CheckpointManager(
            checkpoint, directory, max_to_keep=keep, checkpoint_name=CHECKPOINT_PREFIX
        )

    @property
    def latest(self) -> str | None:
        path: str | None = self._manager.latest_checkpoint
        return path

    def restore_latest(self) -> str | None:
        """Restore the newest checkpoint, if any; return its path.

        Every object of the current model must be in it: a checkpoint from a different
        architecture (other --hidden-units) fails here instead of training on from a
        half-restored state.
        """
        path = self.latest
        if path is not None:
            self._checkpoint.restore(path).assert_existing_objects_matched()
        return path

    def save(self, step: int) -> str | None:
        """Write a checkpoint numbered `step`; return its path on the chief."""
        if self._is_chief:
            return str(self._manager.save(checkpoint_number=step))
        with scratch_dir(prefix="tfjob-checkpoint-") as scratch:
            tf.train.CheckpointManager(self._checkpoint, scratch, max_to_keep=1).save(
                checkpoint_number=step
            )
        return None
