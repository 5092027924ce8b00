"""The policies `decide` applies: failures, restart groups, backoff, success, and which
status changes record a decision."""

from __future__ import annotations

import pytest
from support.builders import replica_of, replica_spec

from tfjob_operator.api import RestartPolicy
from tfjob_operator.failure_policy import is_retryable, past_backoff_limit, restart_group
from tfjob_operator.observe import Failure
from tfjob_operator.spec import JobSpec, parse_spec
from tfjob_operator.status import StatusWrite, status_write
from tfjob_operator.success_policy import leader_succeeded
from tfjob_operator.tfconfig import cluster_digest, job_configs, tf_config

PSS = parse_spec(
    "mnist",
    {
        "tfReplicaSpecs": {
            "Chief": replica_spec(1),
            "Worker": replica_spec(2),
            "PS": replica_spec(1),
            "Evaluator": replica_spec(1),
        }
    },
)
MWMS = parse_spec("mnist", {"tfReplicaSpecs": {"Worker": replica_spec(3)}})


@pytest.mark.parametrize(
    ("policy", "code", "retryable"),
    [
        (RestartPolicy.EXIT_CODE, 1, False),
        (RestartPolicy.EXIT_CODE, 127, False),
        (RestartPolicy.EXIT_CODE, 42, True),
        (RestartPolicy.EXIT_CODE, 128, True),
        (RestartPolicy.EXIT_CODE, 143, True),
        (RestartPolicy.NEVER, 137, False),
        (RestartPolicy.ON_FAILURE, 137, False),
    ],
)
def test_retryable_exit_codes(policy: RestartPolicy, code: int, retryable: bool) -> None:
    assert is_retryable(policy, Failure(code, "Error", "", disrupted=False)) is retryable
    assert is_retryable(policy, Failure(None, "Evicted", "", disrupted=True))


def test_a_ps_job_restarts_a_worker_alone_and_anything_else_with_the_training_group() -> None:
    assert restart_group(PSS, replica_of("worker-1")) == {replica_of("worker-1")}
    assert {r.key for r in restart_group(PSS, replica_of("ps-0"))} == {
        "chief-0",
        "worker-0",
        "worker-1",
        "ps-0",
    }
    assert restart_group(PSS, replica_of("evaluator-0")) == {replica_of("evaluator-0")}
    assert {r.key for r in restart_group(MWMS, replica_of("worker-2"))} == {
        "worker-0",
        "worker-1",
        "worker-2",
    }


@pytest.mark.parametrize(
    ("limit", "job", "in_place", "past"),
    [(None, 100, 100, False), (3, 3, 0, False), (3, 2, 2, True), (0, 1, 0, True)],
)
def test_backoff_counts_job_and_in_place_restarts_together(
    limit: int | None, job: int, in_place: int, past: bool
) -> None:
    assert past_backoff_limit(limit, job, in_place) is past


def test_the_chief_decides_success_else_worker_zero_else_every_worker() -> None:
    assert leader_succeeded(PSS, {"Chief": {0}})
    assert not leader_succeeded(PSS, {"Worker": {0, 1}})
    assert leader_succeeded(MWMS, {"Worker": {0}})
    all_workers = parse_spec(
        "mnist", {"successPolicy": "AllWorkers", "tfReplicaSpecs": {"Worker": replica_spec(3)}}
    )
    assert not leader_succeeded(all_workers, {"Worker": {0, 1}})
    assert leader_succeeded(all_workers, {"Worker": {0, 1, 2}})


def condition(kind: str, status: str, reason: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason}


def test_progress_waits_the_running_transition_does_not_and_a_restart_or_outcome_decides() -> None:
    created = {"conditions": [condition("Created", "True", "TFJobCreated")]}
    running = {
        "conditions": [*created["conditions"], condition("Running", "True", "TFJobRunning")],
        "replicaStatuses": {"Worker": {"active": 3, "succeededIndexes": []}},
        "activeReplicas": 3,
    }
    assert status_write({}, created) is StatusWrite.PROGRESS
    assert status_write(created, running) is StatusWrite.TRANSITION
    assert status_write(running, {**running, "activeReplicas": 2}) is StatusWrite.PROGRESS
    assert status_write(running, {**running, "restartCount": 1}) is StatusWrite.DECISION
    generations = {**running, "replicaGenerations": {"worker-0": 1}}
    assert status_write(running, generations) is StatusWrite.DECISION
    succeeded = {**running, "replicaStatuses": {"Worker": {"succeededIndexes": [0]}}}
    assert status_write(running, succeeded) is StatusWrite.DECISION
    failed = {"conditions": [condition("Failed", "True", "ReplicaFailed")]}
    assert status_write(created, failed) is StatusWrite.DECISION
    stopped = {
        **running,
        "conditions": [*created["conditions"], condition("Running", "False", "Restarting")],
    }
    assert status_write(running, stopped) is StatusWrite.TRANSITION


@pytest.mark.parametrize(
    "spec", [PSS, MWMS, parse_spec("one", {"tfReplicaSpecs": {"Worker": replica_spec(1)}})]
)
def test_job_configs_match_each_replicas_own_tf_config(spec: JobSpec) -> None:
    configs = job_configs("mnist", "ml", spec, "cluster.local")
    for r in spec.replicas():
        own = tf_config("mnist", "ml", spec, r, "cluster.local")
        assert configs.configs[r.key] == own
        assert configs.digests[r.key] == cluster_digest(own)
