"""End-to-end scenarios: TFJobs that train real TensorFlow models across pods.

Each scenario runs on the selected backends (see support/backends.py) and asserts on the
TFJob's status, its events and the trainer's `TFJOB_RESULT` line read from pod logs.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

import pytest
from support.backends import Backend
from support.builders import GENERATION_ENV
from support.examples import example, set_args
from support.tfjobs import PodCreations, TFJobs, condition, find_condition
from support.waiting import wait_until

from tfjob_localcluster.diagnose import describe_pods
from tfjob_localcluster.images.catalog import TRAINER
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.client.results import results_in

TRAINING_TIMEOUT = 420


def results(tfjobs: TFJobs, pod: str) -> dict[str, Any]:
    """The trainer's results line from the pod's log, read through the API server."""
    log = tfjobs.log(pod, "tensorflow")
    found = results_in(log.splitlines())
    assert len(found) == 1, f"{pod}: expected one results line, log ends:\n{log[-3000:]}"
    return found[0]


def wait_for_log(tfjobs: TFJobs, pod: str, needle: str, timeout: float = 240) -> None:
    def read() -> str:
        try:
            log = tfjobs.log(pod, "tensorflow")
        except ApiError:
            return ""  # not started yet, or replaced
        return log

    wait_until(
        read,
        timeout,
        lambda log: f"{needle!r} in {pod}'s log; it ends:\n{log[-2000:]}",
        until=lambda log: needle in log,
        interval=0.5,
    )


@pytest.mark.demo_path
def test_mwms_two_workers_train_digits(tfjobs: TFJobs) -> None:
    """1. MultiWorkerMirroredStrategy, 2 workers: Succeeded, accuracy above the threshold."""
    tfjobs.create(example("digits-mwms.yaml"))
    job = tfjobs.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    assert job["status"]["restartCount"] == 0
    chief = results(tfjobs, "digits-mwms-worker-0")
    assert chief["strategy"] == "multi-worker-mirrored"
    assert chief["replicas"] == 2
    assert chief["accuracy"] >= chief["accuracy_threshold"]
    tfjobs.wait_events("digits-mwms", ["TFJobSucceeded"])


@pytest.mark.demo_path
def test_pss_with_evaluator_succeeds_when_the_chief_finishes(tfjobs: TFJobs) -> None:
    """2. ParameterServerStrategy with an evaluator: ps and workers cleaned up."""
    tfjobs.create(example("digits-pss.yaml"))
    job = tfjobs.wait_state("digits-pss", "Succeeded", TRAINING_TIMEOUT)
    chief = results(tfjobs, "digits-pss-chief-0")
    assert chief["strategy"] == "parameter-server"
    assert chief["accuracy"] >= chief["accuracy_threshold"]
    evaluator = results(tfjobs, "digits-pss-evaluator-0")
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert evaluator["accuracy"] >= evaluator["accuracy_threshold"]
    # cleanPodPolicy Running (the default): the ps and workers, which never exit, are gone.
    tfjobs.wait_pods(
        "digits-pss",
        lambda pods: (
            sorted(p["metadata"]["name"] for p in pods)
            == ["digits-pss-chief-0", "digits-pss-evaluator-0"]
            and {p["status"]["phase"] for p in pods} == {"Succeeded"}
        ),
        "only the chief and the evaluator left, both Succeeded",
    )
    assert job["status"]["replicaStatuses"]["Chief"]["succeeded"] == 1


def test_killed_mwms_worker_restarts_the_group_and_resumes(
    tfjobs: TFJobs, backend: Backend
) -> None:
    """3. A worker SIGKILLed mid-training: one group restart, resume from the backup."""
    tfjobs.create(set_args(example("digits-mwms.yaml"), ["--epochs", "15"]))
    wait_for_log(tfjobs, "digits-mwms-worker-1", "epoch 3/15")
    backend.kill_container(tfjobs.namespace, "digits-mwms-worker-1")
    job = tfjobs.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    assert job["status"]["restartCount"] == 1
    assert job["status"]["replicaGenerations"] == {"worker-0": 1, "worker-1": 1}
    (restart,) = [e for e in tfjobs.events("digits-mwms") if e["reason"] == "TFJobRestarting"]
    assert restart.get("count") in (None, 1)  # reported once, not counted up by a repeat
    # The kubelet reports worker 1's SIGKILL (137) and worker 0's exit on losing its peer
    # (42) in either order; one restart of the group covers both.
    assert re.match(
        r"worker-1 exited with code 137|worker-0 exited with code 42", restart["message"]
    )
    chief = results(tfjobs, "digits-mwms-worker-0")
    assert chief["initial_epoch"] >= 2, "training must resume from the backup, not from 0"
    assert chief["accuracy"] >= chief["accuracy_threshold"]


def test_user_error_fails_the_job_and_cleans_up(tfjobs: TFJobs) -> None:
    """4. Exit 1 under ExitCode is a bug in the training code: Failed, not retried."""
    job = example("digits-mwms.yaml")
    job["spec"]["tfReplicaSpecs"]["Chief"] = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["Worker"])
    job["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 1
    chief = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    chief["command"] = ["python", "-c", "import tensorflow, sys; sys.exit('learning rate < 0')"]
    chief["args"] = []
    tfjobs.create(job)
    failed = tfjobs.wait_state("digits-mwms", "Failed", TRAINING_TIMEOUT)
    message = condition(failed, "Failed")["message"]
    assert "chief-0 exited with code 1" in message
    assert failed["status"]["restartCount"] == 0
    # The workers, still waiting for the chief, are deleted (cleanPodPolicy Running).
    tfjobs.wait_pods(
        "digits-mwms",
        lambda pods: [p["metadata"]["name"] for p in pods] == ["digits-mwms-chief-0"],
        "only the failed chief left",
    )
    log = tfjobs.log("digits-mwms-chief-0")
    assert "learning rate < 0" in log


def test_job_asking_for_too_many_gpus_stays_pending_and_says_why(tfjobs: TFJobs) -> None:
    """5. More nvidia.com/gpu than the cluster has: Pending, and the status says why."""
    job = example("digits-gpu.yaml")
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 64
    tfjobs.create(job)
    pending = tfjobs.wait_for(
        "digits-gpu",
        lambda j: (find_condition(j, "Running") or {}).get("reason") == "Unschedulable",
        "the Unschedulable reason",
        120,
    )
    assert "nvidia.com/gpu" in condition(pending, "Running")["message"]
    time.sleep(5)
    job = tfjobs.get("digits-gpu")
    assert job["status"]["state"] == "Created"
    assert all(p["status"]["phase"] == "Pending" for p in tfjobs.pods("digits-gpu"))
    unschedulable = [e for e in tfjobs.events("digits-gpu") if e["reason"] == "Unschedulable"]
    assert len(unschedulable) == 1
    assert unschedulable[0]["type"] == "Warning"


@pytest.mark.local_gpus
def test_gpus_given_to_a_trainer_without_cuda_fail_it_at_start_saying_why(
    tfjobs: TFJobs, backend: Backend
) -> None:
    """5b. The GPU example on the CPU image, on the local node's (fake) GPUs: the trainer
    refuses to train on the CPU unnoticed; exit 2 fails the job at once, the log says why."""
    if backend.name != "local":
        pytest.skip("kind's node advertises no nvidia.com/gpu")
    job = example("digits-gpu.yaml")
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["image"] = TRAINER
    tfjobs.create(job)
    failed = tfjobs.wait_state("digits-gpu", "Failed", 180)
    assert "exited with code 2" in condition(failed, "Failed")["message"]
    log = tfjobs.log("digits-gpu-worker-0")
    assert (
        "tfjob-train: invalid configuration: the pod was given 1 GPU(s) but TensorFlow sees "
        "none: this image has no CUDA libraries"
    ) in log
    assert "Traceback" not in log


def test_operator_restart_mid_training_creates_no_duplicates(
    tfjobs: TFJobs, backend: Backend
) -> None:
    """6. The operator killed and restarted while the job trains: it finishes, once."""
    job = set_args(example("digits-mwms.yaml"), ["--epochs", "20"])
    with PodCreations(backend.kubeconfig, tfjobs.namespace, "digits-mwms") as creations:
        tfjobs.create(job)
        wait_for_log(tfjobs, "digits-mwms-worker-0", "epoch 2/20")
        backend.kill_operator()
        time.sleep(3)
        backend.start_operator()
        finished = tfjobs.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    assert creations.duplicates() == []
    assert sorted(name for name, _, _ in creations.added) == [
        "digits-mwms-worker-0",
        "digits-mwms-worker-1",
    ]
    assert finished["status"]["restartCount"] == 0
    assert results(tfjobs, "digits-mwms-worker-0")["accuracy"] >= 0.9


def test_deleting_a_running_tfjob_removes_its_pods_and_services(tfjobs: TFJobs) -> None:
    """7. Deleting a running TFJob garbage-collects every pod and service."""
    tfjobs.create(set_args(example("digits-pss.yaml"), ["--epochs", "200"]))
    tfjobs.wait_state("digits-pss", "Running", TRAINING_TIMEOUT)
    assert len(tfjobs.services("digits-pss")) == 5
    tfjobs.delete("digits-pss")
    tfjobs.wait_gone("digits-pss", 120)


def test_worker_over_its_memory_limit_is_oom_killed_and_retried(tfjobs: TFJobs) -> None:
    """8. Worker 1 goes over its memory limit: the kernel kills it (OOMKilled, 137), and
    ExitCode retries it with the group; the second incarnation stays within the limit."""
    job = example("digits-mwms.yaml")
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"limits": {"memory": "1536Mi"}}
    worker["env"] = [GENERATION_ENV]
    # The first incarnation of worker 1 touches 2 GiB before it trains.
    worker["args"] = [
        'if [ "$GENERATION" = 0 ] && [ "$TFJOB_REPLICA_INDEX" = 1 ]; then '
        'exec python -c \'block = b"x" * (2 * 2**30)\'; fi; exec tfjob-train "$@"',
        "tfjob-train",
        *worker["args"],
    ]
    worker["command"] = ["sh", "-c"]
    tfjobs.create(job)
    finished = tfjobs.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    assert finished["status"]["restartCount"] == 1
    (restart,) = [e for e in tfjobs.events("digits-mwms") if e["reason"] == "TFJobRestarting"]
    assert restart.get("count") in (None, 1)  # reported once, not counted up by a repeat
    assert "worker-1 exited with code 137 (OOMKilled)" in restart["message"]
    assert results(tfjobs, "digits-mwms-worker-0")["accuracy"] >= 0.9


def test_a_peer_that_never_starts_is_diagnosed_within_a_minute(tfjobs: TFJobs) -> None:
    """9. Worker 1 can never be scheduled: worker 0 waits in the strategy's setup, says
    for which peer and why, and the diagnosis the demo prints shows both replicas."""
    job = example("digits-mwms.yaml")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    absent = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["Worker"])
    absent["template"]["spec"]["nodeSelector"] = {"tfjob.dev/no-such-node": "true"}
    job["spec"]["tfReplicaSpecs"]["Chief"] = absent
    tfjobs.create(job)
    started = time.monotonic()
    wait_for_log(tfjobs, "digits-mwms-worker-0", "still waiting for its peers", timeout=60)
    assert time.monotonic() - started < 60
    report = describe_pods(tfjobs.rest, tfjobs.namespace)
    assert "pod/digits-mwms-chief-0: Pending (not scheduled: Unschedulable" in report
    assert "pod/digits-mwms-worker-0: Running" in report
    waiting = next(line for line in report.splitlines() if "still waiting" in line)
    assert "worker-0 still waiting for its peers" in waiting
    assert f"chief-0 at digits-mwms-chief-0.{tfjobs.namespace}.svc:2222" in waiting


def test_two_workers_of_two_devices_each_train_four_replicas_in_sync(tfjobs: TFJobs) -> None:
    """10. Several devices per pod: two workers, each with two logical CPU devices standing
    in for two GPUs, train one model as four MultiWorkerMirroredStrategy replicas; each
    replica gets its share of the global batch, and the threshold is reached."""
    job = set_args(example("digits-mwms.yaml"), ["--cpu-devices", "2"])
    job["spec"]["successPolicy"] = "AllWorkers"  # both workers' results are read
    tfjobs.create(job)
    tfjobs.wait_state("digits-mwms", "Succeeded", TRAINING_TIMEOUT)
    found = [results(tfjobs, f"digits-mwms-worker-{index}") for index in (0, 1)]
    for index, result in enumerate(found):
        assert result["strategy"] == "multi-worker-mirrored"
        assert result["replicas"] == 4
        assert result["global_batch_size"] == 128
        assert result["replica_batch_sizes"] == [32, 32]
        assert [d.rsplit("/", 2)[-2:] for d in result["replica_devices"]] == [
            [f"task:{index}", "device:CPU:0"],
            [f"task:{index}", "device:CPU:1"],
        ]
        assert result["accuracy"] >= result["accuracy_threshold"]
    assert found[0]["accuracy"] == found[1]["accuracy"]
    log = tfjobs.log("digits-mwms-worker-1")
    assert "devices: /cpu:0, /cpu:1" in log
