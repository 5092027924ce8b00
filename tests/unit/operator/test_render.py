"""Pods, services and TF_CONFIG rendered from a TFJob spec."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.builders import JOB, replica_of, replica_spec

from tfjob_operator.render import render_pod, render_service
from tfjob_operator.spec import Replica, parse_spec
from tfjob_operator.tfconfig import tf_config


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "tensorflow")
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def pod_env(spec: dict[str, Any], key: str, domain: str | None = None) -> dict[str, Any]:
    parsed = parse_spec(JOB.name, spec)
    return env_of(render_pod(JOB, parsed, replica_of(key), 0, domain))


def config_of(spec: dict[str, Any], key: str, domain: str | None = None) -> dict[str, Any]:
    value = pod_env(spec, key, domain).get("TF_CONFIG")
    assert value, f"{key}'s pod has no TF_CONFIG"
    config: dict[str, Any] = json.loads(value)
    return config


def test_single_replica_gets_no_tf_config() -> None:
    assert "TF_CONFIG" not in pod_env({"tfReplicaSpecs": {"Worker": replica_spec(1)}}, "worker-0")


def test_ps_and_worker_tf_config_matches_kubeflow() -> None:
    spec = {"tfReplicaSpecs": {"PS": replica_spec(1), "Worker": replica_spec(1)}}
    assert config_of(spec, "worker-0") == {
        "cluster": {
            "ps": ["mnist-ps-0.ml.svc:2222"],
            "worker": ["mnist-worker-0.ml.svc:2222"],
        },
        "task": {"type": "worker", "index": 0},
        "environment": "cloud",
    }
    assert config_of(spec, "ps-0")["task"] == {"type": "ps", "index": 0}


def test_cluster_domain_is_appended_to_every_host() -> None:
    spec = {"tfReplicaSpecs": {"PS": replica_spec(1), "Worker": replica_spec(2)}}
    cluster = config_of(spec, "worker-1", "cluster.local")["cluster"]
    assert cluster == {
        "ps": ["mnist-ps-0.ml.svc.cluster.local:2222"],
        "worker": [
            "mnist-worker-0.ml.svc.cluster.local:2222",
            "mnist-worker-1.ml.svc.cluster.local:2222",
        ],
    }


def test_master_renders_as_chief_with_its_own_host_name() -> None:
    spec = {"tfReplicaSpecs": {"Master": replica_spec(1), "Worker": replica_spec(1)}}
    config = config_of(spec, "master-0")
    assert config["cluster"]["chief"] == ["mnist-master-0.ml.svc:2222"]
    assert "master" not in config["cluster"]
    assert config["task"] == {"type": "chief", "index": 0}


def test_evaluator_only_in_its_own_tf_config() -> None:
    spec = {
        "tfReplicaSpecs": {
            "Chief": replica_spec(1),
            "Worker": replica_spec(2),
            "PS": replica_spec(1),
            "Evaluator": replica_spec(1),
        }
    }
    for key in ("chief-0", "worker-0", "worker-1", "ps-0"):
        assert "evaluator" not in config_of(spec, key)["cluster"], key
    evaluator = config_of(spec, "evaluator-0")
    assert evaluator["cluster"]["evaluator"] == ["mnist-evaluator-0.ml.svc:2222"]
    assert evaluator["cluster"]["chief"] == ["mnist-chief-0.ml.svc:2222"]
    assert evaluator["task"] == {"type": "evaluator", "index": 0}


def test_named_port_sets_the_tf_config_port_and_is_not_duplicated() -> None:
    ports = [{"name": "tfjob-port", "containerPort": 3333}]
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, ports=ports)}}
    parsed = parse_spec(JOB.name, spec)
    pod = render_pod(JOB, parsed, Replica(replica_of("worker-0").type, 0), 0)
    assert config_of(spec, "worker-0")["cluster"]["worker"][0].endswith(":3333")
    assert pod["spec"]["containers"][0]["ports"] == ports
    service = render_service(JOB, parsed, replica_of("worker-0"))
    assert service["spec"]["ports"][0]["port"] == 3333


def test_default_port_added_and_user_tf_config_replaced() -> None:
    env = [{"name": "TF_CONFIG", "value": "{}"}, {"name": "OTHER", "value": "1"}]
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, env=env)}}
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-1"), 0)
    container = pod["spec"]["containers"][0]
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
    names = [e["name"] for e in container["env"]]
    assert names.count("TF_CONFIG") == 1
    assert "OTHER" in names
    assert json.loads(env_of(pod)["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


def test_pod_and_service_identity_labels_and_owner() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2)}}
    parsed = parse_spec(JOB.name, spec)
    pod = render_pod(JOB, parsed, replica_of("worker-1"), 3)
    service = render_service(JOB, parsed, replica_of("worker-1"))
    assert pod["metadata"]["name"] == service["metadata"]["name"] == "mnist-worker-1"
    labels = pod["metadata"]["labels"]
    assert labels["tfjob.dev/job-name"] == "mnist"
    assert labels["tfjob.dev/replica-type"] == "worker"
    assert labels["tfjob.dev/replica-index"] == "1"
    assert labels["tfjob.dev/replica-generation"] == "3"
    assert "tfjob.dev/job-role" not in labels
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {
        "tfjob.dev/job-name": "mnist",
        "tfjob.dev/replica-type": "worker",
        "tfjob.dev/replica-index": "1",
    }
    for obj in (pod, service):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "tfjob.dev/v1",
            "kind": "TFJob",
            "name": "mnist",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }


@pytest.mark.parametrize(
    ("specs", "leader"),
    [
        ({"Chief": replica_spec(1), "Worker": replica_spec(2)}, "chief-0"),
        ({"Master": replica_spec(1), "Worker": replica_spec(2)}, "master-0"),
        ({"Worker": replica_spec(2), "PS": replica_spec(1)}, "worker-0"),
    ],
)
def test_job_role_chief_marks_the_leader_only(specs: dict[str, Any], leader: str) -> None:
    parsed = parse_spec(JOB.name, {"tfReplicaSpecs": specs})
    roles = {
        r.key: render_pod(JOB, parsed, r, 0)["metadata"]["labels"].get("tfjob.dev/job-role")
        for r in parsed.replicas()
    }
    assert {k for k, v in roles.items() if v == "chief"} == {leader}


def test_exit_code_policy_becomes_pod_restart_policy_never() -> None:
    spec = {
        "tfReplicaSpecs": {
            "Worker": replica_spec(1, "ExitCode"),
            "PS": replica_spec(1, "OnFailure"),
            "Chief": replica_spec(1),
        }
    }
    parsed = parse_spec(JOB.name, spec)
    policies = {
        r.key: render_pod(JOB, parsed, r, 0)["spec"]["restartPolicy"] for r in parsed.replicas()
    }
    assert policies == {"worker-0": "Never", "ps-0": "OnFailure", "chief-0": "Never"}


def test_gpu_request_gets_toleration_once() -> None:
    gpu = {"limits": {"nvidia.com/gpu": 1}}
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(1, resources=gpu)}}
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-0"), 0)
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    own = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [own]
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-0"), 0)
    assert pod["spec"]["tolerations"] == [own]


def test_cpu_pod_gets_no_gpu_toleration() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(1)}}
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-0"), 0)
    assert "tolerations" not in pod["spec"]


def test_priority_class_from_scheduling_policy() -> None:
    spec = {
        "tfReplicaSpecs": {"Worker": replica_spec(1)},
        "runPolicy": {"schedulingPolicy": {"priorityClass": "high"}},
    }
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-0"), 0)
    assert pod["spec"]["priorityClassName"] == "high"


def test_template_is_not_mutated() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2)}}
    before = json.dumps(spec, sort_keys=True)
    parsed = parse_spec(JOB.name, spec)
    for r in parsed.replicas():
        render_pod(JOB, parsed, r, 0)
    assert json.dumps(spec, sort_keys=True) == before


def test_tf_config_task_index_per_replica() -> None:
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(3)}}
    parsed = parse_spec(JOB.name, spec)
    configs = [tf_config("mnist", "ml", parsed, r, None) for r in parsed.replicas()]
    assert [c["task"]["index"] if c else None for c in configs] == [0, 1, 2]


def test_identity_variables_come_first_and_the_template_may_override_them() -> None:
    env = [{"name": "TFJOB_NAME", "value": "mine"}, {"name": "DIR", "value": "/x/$(TFJOB_UID)"}]
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(2, env=env)}}
    pod = render_pod(JOB, parse_spec(JOB.name, spec), replica_of("worker-1"), 0)
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names == [
        "TFJOB_NAMESPACE",
        "TFJOB_UID",
        "TFJOB_REPLICA_TYPE",
        "TFJOB_REPLICA_INDEX",
        "TFJOB_NAME",
        "DIR",
        "TF_CONFIG",
    ]
    values = env_of(pod)
    assert values["TFJOB_UID"] == "uid-1"
    assert values["TFJOB_NAME"] == "mine"
    assert values["TFJOB_REPLICA_INDEX"] == "1"


def test_the_gpu_limit_reaches_the_trainer_so_it_can_check_tensorflow_sees_it() -> None:
    gpu = {"limits": {"nvidia.com/gpu": 2}}
    spec = {"tfReplicaSpecs": {"Worker": replica_spec(1, resources=gpu), "PS": replica_spec(1)}}
    parsed = parse_spec(JOB.name, spec)
    assert env_of(render_pod(JOB, parsed, replica_of("worker-0"), 0))["TFJOB_GPUS"] == "2"
    assert "TFJOB_GPUS" not in env_of(render_pod(JOB, parsed, replica_of("ps-0"), 0))
