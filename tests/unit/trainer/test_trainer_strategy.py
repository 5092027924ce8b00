"""Strategy and role choice from TF_CONFIG, the requested strategy and the GPU count."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tfjob_trainer.errors import ConfigError
from tfjob_trainer.strategy_choice import Role, StrategyName, choose_strategy, role_of
from tfjob_trainer.tf_config import TFConfig, parse_tf_config

AUTO = StrategyName.AUTO
MWMS = StrategyName.MULTI_WORKER_MIRRORED
PSS = StrategyName.PARAMETER_SERVER
MIRRORED = StrategyName.MIRRORED
DEFAULT = StrategyName.DEFAULT

PSS_CLUSTER = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"], "evaluator": ["e:1"]}
TWO_WORKERS = {"worker": ["w0:1", "w1:1"]}
CHIEF_AND_WORKER = {"chief": ["c:1"], "worker": ["w0:1"]}
ONE_WORKER = {"worker": ["w0:1"]}


def config(cluster: dict[str, Any], task_type: str, index: int = 0) -> TFConfig:
    return parse_tf_config(
        json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
    )


@pytest.mark.parametrize(
    ("cluster", "task_type", "gpus", "expected"),
    [
        (PSS_CLUSTER, "chief", 0, PSS),
        (PSS_CLUSTER, "worker", 4, PSS),
        (PSS_CLUSTER, "ps", 0, PSS),
        (TWO_WORKERS, "worker", 0, MWMS),
        (CHIEF_AND_WORKER, "chief", 2, MWMS),
        (ONE_WORKER, "worker", 0, DEFAULT),
        (ONE_WORKER, "worker", 1, DEFAULT),
        (ONE_WORKER, "worker", 2, MIRRORED),
    ],
)
def test_automatic_choice(
    cluster: dict[str, Any], task_type: str, gpus: int, expected: StrategyName
) -> None:
    assert choose_strategy(config(cluster, task_type), AUTO, gpus) == expected


def test_no_tf_config_uses_default_or_mirrored() -> None:
    assert choose_strategy(TFConfig(), AUTO, 0) == DEFAULT
    assert choose_strategy(TFConfig(), AUTO, 8) == MIRRORED


@pytest.mark.parametrize("requested", list(StrategyName))
def test_evaluator_never_joins_the_training_strategy(requested: StrategyName) -> None:
    evaluator = config(PSS_CLUSTER, "evaluator")
    assert choose_strategy(evaluator, requested, 2) == DEFAULT
    assert role_of(evaluator, DEFAULT) == Role.EVALUATOR


@pytest.mark.parametrize(
    ("cluster", "requested"),
    [
        (TWO_WORKERS, MWMS),
        (ONE_WORKER, MWMS),
        (ONE_WORKER, MIRRORED),
        (ONE_WORKER, DEFAULT),
        (PSS_CLUSTER, PSS),
    ],
)
def test_forced_strategy_that_fits_is_used(
    cluster: dict[str, Any], requested: StrategyName
) -> None:
    task = "chief" if "chief" in cluster else "worker"
    assert choose_strategy(config(cluster, task), requested, 0) == requested


@pytest.mark.parametrize(
    ("cluster", "requested", "fragment"),
    [
        (TWO_WORKERS, PSS, "needs ps tasks"),
        (PSS_CLUSTER, MWMS, "cannot run a cluster with ps tasks"),
        (PSS_CLUSTER, MIRRORED, "cannot run a cluster with ps tasks"),
        (TWO_WORKERS, MIRRORED, "2 chief/worker tasks"),
        (CHIEF_AND_WORKER, DEFAULT, "2 chief/worker tasks"),
    ],
)
def test_forced_strategy_that_cannot_work_is_refused(
    cluster: dict[str, Any], requested: StrategyName, fragment: str
) -> None:
    task = "chief" if "chief" in cluster else "worker"
    with pytest.raises(ConfigError, match=fragment):
        choose_strategy(config(cluster, task), requested, 0)


@pytest.mark.parametrize(
    ("task_type", "role"),
    [("chief", Role.COORDINATOR), ("worker", Role.WORKER_SERVER), ("ps", Role.PS_SERVER)],
)
def test_roles_under_parameter_server(task_type: str, role: Role) -> None:
    assert role_of(config(PSS_CLUSTER, task_type), PSS) == role


@pytest.mark.parametrize("strategy", [MWMS, MIRRORED, DEFAULT])
def test_every_training_task_is_a_replica_otherwise(strategy: StrategyName) -> None:
    assert role_of(config(CHIEF_AND_WORKER, "chief"), strategy) == Role.REPLICA
    assert role_of(config(CHIEF_AND_WORKER, "worker"), strategy) == Role.REPLICA
