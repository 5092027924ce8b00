"""TF_CONFIG validation in the trainer: what TensorFlow would accept and then hang on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tfjob_trainer.errors import ConfigError
from tfjob_trainer.tf_config import TFConfig, parse_tf_config

PSS_CLUSTER = {
    "chief": ["job-chief-0.ns.svc:2222"],
    "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
    "ps": ["job-ps-0.ns.svc:2222"],
}


def render(cluster: dict[str, Any], task_type: Any, index: Any = 0, **extra: Any) -> str:
    return json.dumps(
        {
            "cluster": cluster,
            "task": {"type": task_type, "index": index},
            "environment": "cloud",
            **extra,
        }
    )


def test_operator_rendering_parses() -> None:
    config = parse_tf_config(render(PSS_CLUSTER, "worker", 1))
    assert config.task_type == "worker"
    assert config.task_index == 1
    assert config.address == "job-worker-1.ns.svc:2222"
    assert config.rpc_layer == "grpc"
    assert config.has_ps
    assert config.num_training_tasks == 3


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_absent_tf_config_is_a_lone_chief(text: str | None) -> None:
    config = parse_tf_config(text)
    assert config == TFConfig()
    assert config.is_chief
    assert config.training_cluster == {}


def test_evaluator_is_removed_from_the_training_cluster() -> None:
    cluster = {**PSS_CLUSTER, "evaluator": ["job-evaluator-0.ns.svc:2222"]}
    config = parse_tf_config(render(cluster, "evaluator"))
    assert config.task_type == "evaluator"
    assert "evaluator" not in config.training_cluster
    assert config.training_cluster["worker"] == PSS_CLUSTER["worker"]
    assert not config.is_chief


@pytest.mark.parametrize(
    ("cluster", "task_type", "index", "chief"),
    [
        ({"chief": ["a:1"], "worker": ["b:1"]}, "chief", 0, True),
        ({"chief": ["a:1"], "worker": ["b:1"]}, "worker", 0, False),
        ({"worker": ["a:1", "b:1"]}, "worker", 0, True),
        ({"worker": ["a:1", "b:1"]}, "worker", 1, False),
        (PSS_CLUSTER, "ps", 0, False),
    ],
)
def test_is_chief(cluster: dict[str, Any], task_type: str, index: int, chief: bool) -> None:
    assert parse_tf_config(render(cluster, task_type, index)).is_chief is chief


def test_rpc_layer_is_kept() -> None:
    config = parse_tf_config(render({"worker": ["a:1", "b:1"]}, "worker", rpc_layer="grpc+x"))
    assert config.rpc_layer == "grpc+x"


def test_ipv6_addresses_are_accepted() -> None:
    config = parse_tf_config(render({"worker": ["[::1]:2222", "[::1]:2223"]}, "worker"))
    assert config.address == "[::1]:2222"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster'"),
        (json.dumps({"cluster": ["a:1"], "task": {}}), "cluster must be an object"),
        (render({"trainer": ["a:1"]}, "trainer"), "unknown task type 'trainer'"),
        (render({"master": ["a:1"]}, "master"), "'master' is a TensorFlow 1 task type"),
        (render({"worker": ["a:1"]}, "chief"), "task chief:0 is not in the cluster"),
        (render({"worker": ["a:1"]}, "worker", 1), "task worker:1 is not in the cluster"),
        (render({"worker": ["a:1"]}, "worker", -1), "task.index must be an integer >= 0"),
        (render({"worker": ["a:1"]}, "worker", "0"), "task.index must be an integer >= 0"),
        (render({"worker": ["a:1"]}, "worker", True), "task.index must be an integer >= 0"),
        (render({"worker": ["a:1"]}, "ghost"), "unknown task type 'ghost'"),
        (render({"chief": ["a:1", "b:1"], "worker": ["c:1"]}, "worker"), "2 chief tasks"),
        (
            render({"worker": ["a:1"], "evaluator": ["b:1", "c:1"]}, "worker"),
            "2 evaluator tasks",
        ),
        (render({"worker": "a:1"}, "worker"), "must be a list of host:port"),
        (render({"worker": ["a"]}, "worker"), "expected 'host:port'"),
        (render({"worker": ["a:http"]}, "worker"), "expected 'host:port'"),
        (render({"worker": [":2222"]}, "worker"), "expected 'host:port'"),
        (render({"worker": ["a:70000"]}, "worker"), "expected 'host:port'"),
        (render({"worker": [2222]}, "worker"), "must be a 'host:port' string"),
        (render({"worker": ["a:1", "a:1"]}, "worker"), "used by both worker[0] and worker[1]"),
        (render({"worker": ["a:1"], "ps": ["b:1"]}, "worker"), "ps but no chief"),
        (render({"chief": ["a:1"], "ps": ["b:1"]}, "chief"), "ps but no worker"),
        (json.dumps({"cluster": {"worker": ["a:1"]}}), "no 'task'"),
        (json.dumps({"cluster": {"worker": ["a:1"]}, "task": "worker"}), "task must be an object"),
        (render({"worker": ["a:1"]}, "worker", rpc_layer=""), "rpc_layer"),
    ],
)
def test_invalid_tf_config_names_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_tf_config(text)
    message = str(raised.value)
    assert fragment in message
    assert "\n" not in message
