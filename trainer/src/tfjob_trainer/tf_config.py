"""Parse and validate TF_CONFIG before TensorFlow is imported.

The operator renders `{"cluster": {...}, "task": {"type": t, "index": i},
"environment": "cloud"}`. TensorFlow's own resolver accepts a malformed TF_CONFIG and
fails much later (or hangs waiting for a task that does not exist), so every rule it
relies on is checked here and reported as one `ConfigError` line.

An absent or empty TF_CONFIG means a single process, reported as chief 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_trainer.errors import ConfigError

CHIEF = "chief"
WORKER = "worker"
PS = "ps"
EVALUATOR = "evaluator"
TASK_TYPES = (CHIEF, WORKER, PS, EVALUATOR)
TRAINING_TASK_TYPES = (CHIEF, WORKER)


@dataclass(frozen=True)
class TFConfig:
    """A validated TF_CONFIG: the cluster (evaluator included, if any) and this task."""

    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task_type: str = CHIEF
    task_index: int = 0
    rpc_layer: str = "grpc"

    @property
    def training_cluster(self) -> dict[str, list[str]]:
        """The cluster without the evaluator.

        A ParameterServerStrategy coordinator that sees an `evaluator` entry hangs
        connecting to it, and MultiWorkerMirroredStrategy does not need it, so
        training tasks never get it, whatever TF_CONFIG holds.
        """
        return {
            task_type: list(addresses)
            for task_type, addresses in self.cluster.items()
            if task_type != EVALUATOR and addresses
        }

    @property
    def has_ps(self) -> bool:
        return bool(self.cluster.get(PS))

    @property
    def num_training_tasks(self) -> int:
        """Tasks that hold model replicas under MultiWorkerMirroredStrategy."""
        return sum(len(self.cluster.get(task_type, ())) for task_type in TRAINING_TASK_TYPES)

    @property
    def is_chief(self) -> bool:
        """The task that writes checkpoints and exports: chief, else worker 0."""
        if self.task_type == CHIEF:
            return True
        return self.task_type == WORKER and self.task_index == 0 and not self.cluster.get(CHIEF)

    @property
    def address(self) -> str | None:
        addresses = self.cluster.get(self.task_type, ())
        return addresses[self.task_index] if self.task_index < len(addresses) else None


def parse_tf_config(text: str | None) -> TFConfig:
    """Validate a TF_CONFIG string; raise ConfigError naming the first problem."""
    if text is None or not text.strip():
        return TFConfig()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object, got {type(document).__name__}")
    cluster = _parse_cluster(document.get("cluster"))
    task_type, task_index = _parse_task(document.get("task"), cluster)
    rpc_layer = document.get("rpc_layer", "grpc")
    if not isinstance(rpc_layer, str) or not rpc_layer:
        raise ConfigError("TF_CONFIG rpc_layer must be a non-empty string such as 'grpc'")
    config = TFConfig(
        cluster=cluster, task_type=task_type, task_index=task_index, rpc_layer=rpc_layer
    )
    _check_topology(config)
    return config


def _parse_cluster(raw: Any) -> dict[str, tuple[str, ...]]:
    if raw is None:
        raise ConfigError("TF_CONFIG has no 'cluster'")
    if not isinstance(raw, dict):
        raise ConfigError("TF_CONFIG cluster must be an object of task type to addresses")
    cluster: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for task_type, addresses in raw.items():
        _task_type(task_type, where="cluster")
        if not isinstance(addresses, list):
            raise ConfigError(f"TF_CONFIG cluster.{task_type} must be a list of host:port")
        for index, address in enumerate(addresses):
            _check_address(address, f"cluster.{task_type}[{index}]")
            if address in seen:
                raise ConfigError(
                    f"TF_CONFIG address {address} is used by both {seen[address]} "
                    f"and {task_type}[{index}]"
                )
            seen[address] = f"{task_type}[{index}]"
        cluster[task_type] = tuple(addresses)
    for singleton in (CHIEF, EVALUATOR):
        if len(cluster.get(singleton, ())) > 1:
            raise ConfigError(
                f"TF_CONFIG cluster has {len(cluster[singleton])} {singleton} tasks; "
                "at most one is allowed"
            )
    return cluster


def _task_type(task_type: Any, *, where: str) -> str:
    if task_type == "master":
        raise ConfigError(f"TF_CONFIG {where}: 'master' is a TensorFlow 1 task type; use 'chief'")
    if task_type not in TASK_TYPES:
        raise ConfigError(
            f"TF_CONFIG {where}: unknown task type {task_type!r} "
            f"(expected one of {', '.join(TASK_TYPES)})"
        )
    return str(task_type)


def _check_address(address: Any, where: str) -> None:
    if not isinstance(address, str):
        raise ConfigError(f"TF_CONFIG {where} must be a 'host:port' string")
    host, separator, port = address.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"TF_CONFIG {where} is {address!r}; expected 'host:port'")


def _parse_task(raw: Any, cluster: Mapping[str, tuple[str, ...]]) -> tuple[str, int]:
    if raw is None:
        raise ConfigError("TF_CONFIG has a cluster but no 'task'")
    if not isinstance(raw, dict):
        raise ConfigError("TF_CONFIG task must be an object with 'type' and 'index'")
    task_type = _task_type(raw.get("type"), where="task.type")
    task_index = raw.get("index", 0)
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
        raise ConfigError(f"TF_CONFIG task.index must be an integer >= 0, got {task_index!r}")
    addresses = cluster.get(task_type, ())
    if task_index >= len(addresses):
        raise ConfigError(
            f"TF_CONFIG task {task_type}:{task_index} is not in the cluster "
            f"({len(addresses)} {task_type} address(es))"
        )
    return task_type, task_index


def _check_topology(config: TFConfig) -> None:
    if config.has_ps:
        if not config.cluster.get(CHIEF):
            raise ConfigError(
                "TF_CONFIG cluster has ps but no chief: ParameterServerStrategy needs "
                "a chief task to coordinate training"
            )
        if not config.cluster.get(WORKER):
            raise ConfigError(
                "TF_CONFIG cluster has ps but no worker: ParameterServerStrategy "
                "needs at least one worker"
            )
