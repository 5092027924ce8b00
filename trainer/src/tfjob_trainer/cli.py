"""`tfjob-train`: run this task's part of a TFJob.

As a container's first process, it runs itself as a child (init.py), so that a pod
deleted before the task's role has begun goes at once. Configuration (flags,
$TFJOB_STRATEGY, TF_CONFIG, the entry point) is validated before TensorFlow is imported,
so a bad job fails in a fraction of a second with one line on stderr. Then: devices are
configured, the strategy is created, and the role runs: ps/worker servers under
ParameterServerStrategy, the evaluator, or training (built-in or --entrypoint).

Exit codes (the operator restarts on 42 and >= 128; see exit_codes.py):
    0    success, after the `TFJOB_RESULT {json}` line
    1    an error in training code (traceback on stderr)
    2    invalid configuration (one line on stderr)
    42   retryable: preempted after a checkpoint, a lost peer, evaluator timeout
    143  stopped by SIGTERM: a ParameterServerStrategy ps or worker server, or any task
         before its training started
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from tfjob_trainer import exit_codes, init
from tfjob_trainer.entrypoint import EntryFunction, load_entrypoint
from tfjob_trainer.errors import ConfigError, Preempted, RetryableError, one_line
from tfjob_trainer.options import TrainerOptions, parse_options
from tfjob_trainer.stop_report import report_checkpoint
from tfjob_trainer.strategy_choice import (
    Role,
    StrategyName,
    choose_strategy,
    role_of,
)
from tfjob_trainer.tf_config import TFConfig, parse_tf_config
from tfjob_trainer.tf_runtime import prepare_environment

if TYPE_CHECKING:
    from tfjob_trainer.context import TrainingContext

_STARTED = time.monotonic()


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and init.is_first_process():
        return init.run_as_child(init.this_command())
    _configure_logging()
    try:
        options = parse_options(sys.argv[1:] if argv is None else argv, os.environ)
        config = parse_tf_config(os.environ.get("TF_CONFIG"))
        # Only the automatic choice depends on the device count, which needs TensorFlow;
        # a forced strategy that cannot fit the cluster is refused here already.
        strategy = choose_strategy(config, options.strategy, local_devices=options.cpu_devices)
        prepare_environment(os.environ, parameter_server=strategy == StrategyName.PARAMETER_SERVER)
        entry = load_entrypoint(options.entrypoint) if options.entrypoint else None
    except ConfigError as error:
        return _fail(exit_codes.INVALID_CONFIGURATION, f"invalid configuration: {error}")
    try:
        return _run(options, config, entry)
    except ConfigError as error:
        return _fail(exit_codes.INVALID_CONFIGURATION, f"invalid configuration: {error}")
    except Preempted as error:
        report_checkpoint(error.epoch, error.step)
        return _exit_now(exit_codes.RETRYABLE, f"{error} (exit 42: retryable)")
    except RetryableError as error:
        return _exit_now(exit_codes.RETRYABLE, f"{error} (exit 42: retryable)")
    except KeyboardInterrupt:
        return _exit_now(128 + 2, "interrupted")
    except Exception as error:
        if _is_lost_peer(error):
            return _exit_now(
                exit_codes.RETRYABLE,
                f"lost a peer: {type(error).__name__}: {one_line(error)} (exit 42: retryable)",
            )
        traceback.print_exc()
        return _fail(exit_codes.TRAINING_ERROR, f"training failed: {type(error).__name__}")


def _run(options: TrainerOptions, config: TFConfig, entry: EntryFunction | None) -> int:
    from tfjob_trainer import tf_runtime

    tf_runtime.quiet_known_noise()
    devices = tf_runtime.configure_devices(options, os.environ)
    strategy_name = choose_strategy(config, options.strategy, len(devices.local))
    role = role_of(config, strategy_name)
    resolver = tf_runtime.cluster_resolver(config, devices)
    if role in (Role.PS_SERVER, Role.WORKER_SERVER):
        from tfjob_trainer.server import serve_forever

        init.role_begun()
        serve_forever(resolver)
    from tfjob_trainer.peers import PeerWatch

    with PeerWatch(config):
        strategy = tf_runtime.create_strategy(strategy_name, resolver, options, devices)
    ctx = _context(options, config, strategy_name, strategy, resolver)
    init.role_begun()
    if entry is None:
        entry = _builtin(role)
    metrics = entry(ctx)
    if metrics is not None:
        from tfjob_trainer.results import print_result

        print_result(ctx.result_fields(metrics))
    return exit_codes.SUCCESS


def _builtin(role: Role) -> EntryFunction:
    if role == Role.EVALUATOR:
        from tfjob_trainer.evaluator import evaluate_checkpoints

        return evaluate_checkpoints
    from tfjob_trainer.training import train

    return train


def _context(
    options: TrainerOptions,
    config: TFConfig,
    strategy_name: StrategyName,
    strategy: Any,
    resolver: Any,
) -> TrainingContext:
    from tfjob_trainer.context import TrainingContext
    from tfjob_trainer.tf_config import EVALUATOR, WORKER

    per_step_replicas = int(strategy.num_replicas_in_sync)
    if config.task_type == EVALUATOR:
        replicas = 1
    elif strategy_name == StrategyName.PARAMETER_SERVER:
        replicas = len(config.cluster.get(WORKER, ())) * per_step_replicas
    else:
        replicas = per_step_replicas
    return TrainingContext(
        task_type=config.task_type,
        task_index=config.task_index,
        is_chief=config.is_chief,
        model_dir=options.model_dir,
        checkpoint_dir=options.checkpoint_dir,
        log_dir=options.log_dir,
        strategy=strategy,
        strategy_name=strategy_name,
        num_replicas=replicas,
        per_replica_batch_size=options.batch_size,
        global_batch_size=options.batch_size * per_step_replicas,
        cluster_resolver=resolver,
        tf_config=config,
        options=options,
        started_at=_STARTED,
    )


def _is_lost_peer(error: BaseException) -> bool:
    """A failure of the cluster, not of the code: a restart of the group fixes it."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(
        error,
        (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError),
    )


def _configure_logging() -> None:
    """Our messages on stderr; TensorFlow's Python loggers keep their own settings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tfjob-train: %(message)s"))
    package_logger = logging.getLogger("tfjob_trainer")
    package_logger.handlers[:] = [handler]
    package_logger.setLevel(logging.INFO)
    package_logger.propagate = False


def _fail(code: int, message: str) -> int:
    print(f"tfjob-train: {message}", file=sys.stderr, flush=True)
    return code


def _exit_now(code: int, message: str) -> NoReturn:
    """Exit without TensorFlow's teardown, which can block on a dead peer."""
    print(f"tfjob-train: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
