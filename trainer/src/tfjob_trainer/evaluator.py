"""Sidecar evaluation: the evaluator task follows the chief's checkpoints.

It evaluates each new checkpoint in --checkpoint-dir on the test split as it appears,
and stops after the one that the chief's `final.json` names. If no new checkpoint
appears for --evaluator-timeout seconds (the chief died, or is restarting), it exits
42 so that it is restarted rather than left hanging.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf

from tfjob_trainer import checkpoints, datasets
from tfjob_trainer.context import TrainingContext
from tfjob_trainer.errors import EvaluatorTimeout
from tfjob_trainer.model import Metrics, build_model, evaluate

logger = logging.getLogger(__name__)


def evaluate_checkpoints(ctx: TrainingContext) -> dict[str, Any]:
    options = ctx.options
    assert options.checkpoint_dir is not None
    split = datasets.load(
        options.dataset, seed=options.seed, synthetic_examples=options.synthetic_examples
    )
    model = build_model(options.hidden_units, options.learning_rate)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    state = tf.train.Checkpoint(model=model, epoch=epoch)
    summaries = (
        tf.summary.create_file_writer(f"{options.log_dir}/eval") if options.log_dir else None
    )

    evaluated: dict[str, tuple[int, Metrics]] = {}
    idle_since = time.monotonic()
    print(f"[evaluator] watching {options.checkpoint_dir}", flush=True)
    while True:
        final = checkpoints.read_final_marker(options.checkpoint_dir)
        candidate = (
            final.checkpoint if final else tf.train.latest_checkpoint(options.checkpoint_dir)
        )
        if candidate and candidate not in evaluated:
            try:
                state.restore(candidate).expect_partial()
            except (tf.errors.NotFoundError, tf.errors.DataLossError) as error:
                # The chief may delete an old checkpoint while it is being read.
                logger.warning("skipping %s: %s", candidate, error.message)
            else:
                metrics = evaluate(model, split.test_x, split.test_y)
                evaluated[candidate] = (int(epoch.numpy()), metrics)
                idle_since = time.monotonic()
                _report(candidate, int(epoch.numpy()), metrics, summaries)
        if final and final.checkpoint in evaluated:
            final_epoch, metrics = evaluated[final.checkpoint]
            return {
                "loss": round(metrics.loss, 6),
                "accuracy": round(metrics.accuracy, 6),
                "examples_per_second": round(metrics.examples / metrics.seconds, 1)
                if metrics.seconds > 0
                else 0.0,
                "epochs": final_epoch,
                "initial_epoch": None,
                "checkpoint": final.checkpoint,
                "checkpoints_evaluated": len(evaluated),
                "dataset": options.dataset,
            }
        if time.monotonic() - idle_since > options.evaluator_timeout_seconds:
            raise EvaluatorTimeout(
                f"no new checkpoint in {options.checkpoint_dir} for "
                f"{options.evaluator_timeout_seconds:g} s and no final marker"
            )
        time.sleep(options.eval_poll_seconds)


def _report(path: str, epoch: int, metrics: Metrics, summaries: Any) -> None:
    print(
        f"[evaluator] {path} epoch={epoch} loss={metrics.loss:.4f} accuracy={metrics.accuracy:.4f}",
        flush=True,
    )
    if summaries is not None:
        with summaries.as_default():
            tf.summary.scalar("loss", metrics.loss, step=epoch)
            tf.summary.scalar("accuracy", metrics.accuracy, step=epoch)
        summaries.flush()
