"""Which distribution strategy and which role a task runs: pure decisions, no TensorFlow.

Automatic choice (`--strategy auto`):

- the cluster has ps tasks: ParameterServerStrategy;
- more than one chief/worker task: MultiWorkerMirroredStrategy;
- one task with several devices (GPUs, or logical CPUs: devices.py): MirroredStrategy;
- otherwise the default strategy.

A forced strategy must fit the cluster: forcing MirroredStrategy on one of several
workers would train independent models that never synchronise, so it is refused.
The evaluator never joins the training strategy: it reads checkpoints alone.
"""

from __future__ import annotations

import enum

from tfjob_trainer.errors import ConfigError
from tfjob_trainer.tf_config import CHIEF, EVALUATOR, PS, WORKER, TFConfig


class StrategyName(enum.StrEnum):
    AUTO = "auto"
    MULTI_WORKER_MIRRORED = "multi-worker-mirrored"
    PARAMETER_SERVER = "parameter-server"
    MIRRORED = "mirrored"
    DEFAULT = "default"


class Role(enum.StrEnum):
    """What this process does."""

    REPLICA = "replica"  # trains a model replica (MWMS, Mirrored, default)
    COORDINATOR = "coordinator"  # the PSS chief: runs the training loop
    PS_SERVER = "ps-server"  # PSS ps: holds variables, serves until SIGTERM
    WORKER_SERVER = "worker-server"  # PSS worker: runs scheduled steps until SIGTERM
    EVALUATOR = "evaluator"  # sidecar evaluation of checkpoints


def choose_strategy(config: TFConfig, requested: StrategyName, local_devices: int) -> StrategyName:
    """The strategy this task creates; raises ConfigError if `requested` cannot work."""
    if config.task_type == EVALUATOR:
        return StrategyName.DEFAULT
    if requested == StrategyName.AUTO:
        if config.has_ps:
            return StrategyName.PARAMETER_SERVER
        if config.num_training_tasks > 1:
            return StrategyName.MULTI_WORKER_MIRRORED
        if local_devices > 1:
            return StrategyName.MIRRORED
        return StrategyName.DEFAULT
    if requested == StrategyName.PARAMETER_SERVER:
        if not config.has_ps:
            raise ConfigError(
                "--strategy parameter-server needs ps tasks in TF_CONFIG; the cluster has none"
            )
    elif config.has_ps:
        raise ConfigError(
            f"--strategy {requested} cannot run a cluster with ps tasks; "
            "use parameter-server or auto"
        )
    elif requested != StrategyName.MULTI_WORKER_MIRRORED and config.num_training_tasks > 1:
        raise ConfigError(
            f"--strategy {requested} trains one process alone, but TF_CONFIG has "
            f"{config.num_training_tasks} chief/worker tasks; use multi-worker-mirrored or auto"
        )
    return requested


def role_of(config: TFConfig, strategy: StrategyName) -> Role:
    """The role of this task under `strategy` (as returned by choose_strategy)."""
    if config.task_type == EVALUATOR:
        return Role.EVALUATOR
    if strategy == StrategyName.PARAMETER_SERVER:
        return {
            CHIEF: Role.COORDINATOR,
            WORKER: Role.WORKER_SERVER,
            PS: Role.PS_SERVER,
        }[config.task_type]
    return Role.REPLICA
