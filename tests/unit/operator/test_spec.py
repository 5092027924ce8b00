"""Defaults and validation of the TFJob spec, as the controller and `render` apply them."""

from __future__ import annotations

from typing import Any

import pytest
from support.builders import replica_spec, template

from tfjob_operator.api import CleanPodPolicy, ReplicaType, RestartPolicy
from tfjob_operator.mergepatch import merge_patch
from tfjob_operator.spec import InvalidSpec, parse_spec


def errors_of(spec: dict[str, Any], name: str = "mnist") -> str:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec(name, spec)
    return "\n".join(caught.value.errors)


def test_defaults_match_the_crd() -> None:
    spec = parse_spec("mnist", {"tfReplicaSpecs": {"Worker": {"template": template()}}})
    worker = spec.replica_specs[ReplicaType.WORKER]
    assert worker.replicas == 1
    assert worker.restart_policy is RestartPolicy.NEVER
    assert spec.run_policy.clean_pod_policy is CleanPodPolicy.RUNNING
    assert spec.run_policy.backoff_limit is None
    assert spec.run_policy.suspend is False


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"tfReplicaSpecs": {}}, "at least one replica type"),
        ({"tfReplicaSpecs": {"Workers": replica_spec()}}, "unknown replica type 'Workers'"),
        (
            {"tfReplicaSpecs": {"Chief": replica_spec(), "Master": replica_spec()}},
            "Chief and Master",
        ),
        ({"tfReplicaSpecs": {"Chief": replica_spec(2)}}, "Chief.replicas: must be at most 1"),
        (
            {"tfReplicaSpecs": {"Worker": replica_spec(), "Evaluator": replica_spec(2)}},
            "Evaluator.replicas: must be at most 1",
        ),
        ({"tfReplicaSpecs": {"Worker": replica_spec(-1)}}, "replicas: must be an integer >= 0"),
        ({"tfReplicaSpecs": {"PS": replica_spec()}}, "PS needs Worker"),
        (
            {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "x"}]}}}}},
            "needs a container named 'tensorflow'",
        ),
        (
            {
                "tfReplicaSpecs": {
                    "Worker": {"template": {"spec": {"containers": [{"name": "tensorflow"}]}}}
                }
            },
            "every container needs a non-empty image (tensorflow has none)",
        ),
        (
            {"tfReplicaSpecs": {"Worker": replica_spec()}, "enableDynamicWorker": True},
            "enableDynamicWorker: is not supported yet",
        ),
        ({"tfReplicaSpecs": {"Worker": replica_spec(0)}}, "needs at least one Chief, Master"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, Any], message: str) -> None:
    assert message in errors_of(spec)


def test_name_must_leave_room_for_child_names() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(10)}}
    parse_spec("a" * 54, spec)  # a...-worker-9 is 63 characters
    assert "limit is 63" in errors_of(spec, "a" * 55)
    assert "DNS-1035" in errors_of(spec, "1abc")


def test_merge_patch_sets_changes_and_removes_keys() -> None:
    old = {"a": 1, "b": {"c": 1, "d": 2}, "e": [1], "gone": True}
    new = {"a": 1, "b": {"c": 2, "d": 2}, "e": [1, 2], "f": {"x": 1}}
    assert merge_patch(old, new) == {"b": {"c": 2}, "e": [1, 2], "f": {"x": 1}, "gone": None}
    assert merge_patch(new, new) == {}
