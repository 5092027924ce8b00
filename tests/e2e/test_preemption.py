"""Kueue preempts a training TFJob for a more urgent one, and the training loses nothing.

The session's local cluster, with the trainer image, the real Kueue beside it
(support/kueue.py) and the operator. A ClusterQueue of 1 CPU that preempts lower
priorities; the MWMS example (2 workers of 400m) trains under a WorkloadPriorityClass of 100
with a longer run (EPOCHS of STEPS_PER_EPOCH steps), its claim shared by both workers; once
it has trained an epoch, an urgent job (a PriorityClass of 1000, 600m) comes. Kueue evicts the
training job (Preempted); the operator deletes its pods; both workers receive SIGTERM, agree
on a step inside the training step, write the backup there, exit 42 and report the step in
their termination messages; the operator records it in status.checkpoint and says it in the
Suspended condition and an event. The urgent job runs and finishes; Kueue admits the
training job again; the operator says it resumes from that step; the trainer resumes at the
step after the backup (no step lost) and reaches the accuracy threshold.

ParameterServerStrategy cannot stop at an agreed step: a suspended job's pods are deleted
together, and its parameter servers, which hold the variables, stop at once, so the
coordinator has nothing to save from when SIGTERM comes. It resumes from the checkpoint it
wrote at its last finished epoch: the second test shows that only the unfinished epoch is
trained again (docs/queueing.md, "Preemption").
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support import summary
from support.cluster import Kubectl
from support.examples import example, set_args
from support.kueue import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    preempting_queue_in,
    queued_tfjob,
    suspended_message,
)
from support.tfjobs import TFJobs, condition

from harness.operator_process import OperatorProcess
from tfjob_localcluster.addons.kueue import Kueue
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.client.results import results_in

log = logging.getLogger(__name__)

EPOCHS = 8
STEPS_PER_EPOCH = 60
#: The training, twice started, on a busy machine.
TRAINING_TIMEOUT = 900
#: The trainer's lines this test reads (tfjob_trainer.callbacks, preemption).
EPOCH_DONE = re.compile(r"\] epoch (\d+)/\d+ ")
RESUMED = re.compile(r"resumed at epoch (\d+), step (\d+)")
BACKUP = re.compile(r"SIGTERM: backup written at epoch (\d+), step \d+ \(step (\d+) of")
RESTORED = re.compile(r"restored \S+ckpt-(\d+) \(epoch (\d+)\)")

#: The pytest output's section (support/summary.py) with where each job stopped and
#: resumed, and its final accuracy.
PREEMPTIONS = "Preempted by Kueue: where the training stopped, resumed, and ended"

Obj = dict[str, Any]


@pytest.fixture
def preempting_queue(
    kueue: Kueue,
    kubectl: Kubectl,
    namespace: str,
    project_images: tuple[str, ...],
    kubeflow_operator: OperatorProcess,
) -> Iterator[tuple[str, str, str]]:
    """A LocalQueue on a ClusterQueue of 1 CPU that preempts lower priorities, and the two
    priorities (queue, low, urgent: support/kueue.py's preempting_queue_in)."""
    with preempting_queue_in(kubectl, namespace) as names:
        yield names


def log_so_far(jobs: TFJobs, pod: str) -> str:
    """The training container's log, or "" while it has none to give."""
    try:
        return jobs.log(pod, "tensorflow")
    except ApiError:  # the pod does not exist yet, or its container has not started
        return ""


def training_job(file: str, queue: str, priority: str) -> Obj:
    """The example in `file`, queued at `priority`, its pods asking 800m between them,
    trained longer."""
    job = set_args(
        example(file), ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS_PER_EPOCH)]
    )
    job["metadata"]["labels"] = {QUEUE_LABEL: queue, PRIORITY_LABEL: priority}
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    specs = job["spec"]["tfReplicaSpecs"].values()
    share = 800 // sum(spec["replicas"] for spec in specs)
    for spec in specs:
        spec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": f"{share}m"}}
    return job


def urgent_job(queue: str, priority_class: str) -> Obj:
    body = queued_tfjob("urgent", queue, "600m", "tfjob.dev/v1")
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = (
        priority_class
    )
    return body


@dataclass
class Preempted:
    """A training job's two runs, around its preemption."""

    name: str
    #: The leader's log of the run Kueue preempted, to its end.
    first_run: str
    #: The job as it waited, its pods gone.
    suspended: Obj
    #: The job once it succeeded, and the leader's log of its second run.
    finished: Obj
    second_run: str
    #: The job's events by reason: the last of each.
    events: dict[str, str]


def preempt_and_resume(
    file: str, leader: str, queue: str, low: str, urgent: str, kubectl: Kubectl, jobs: TFJobs
) -> Preempted:
    """Trains the example in `file` at the low priority; once it has trained an epoch, the
    urgent job takes its quota; when the urgent one is done, the training one runs again
    to its end. The leader's first log is streamed, as the pod is deleted with it."""
    training = training_job(file, queue, low)
    name = training["metadata"]["name"]
    jobs.create(training)
    pod = f"{name}-{leader}"
    jobs.poll(
        name,
        lambda: log_so_far(jobs, pod),
        lambda text: EPOCH_DONE.search(text) is not None,
        "an epoch trained before the urgent job comes",
        TRAINING_TIMEOUT,
    )
    streamed = subprocess.Popen(
        [str(kubectl.path), f"--kubeconfig={kubectl.kubeconfig}", "logs", "-f", "-n",
         jobs.namespace, pod, "-c", "tensorflow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    jobs.create(urgent_job(queue, urgent))
    jobs.wait_for(
        name,
        lambda job: "Kueue took its admission back" in suspended_message(job),
        "the training job preempted",
        60,
    )
    jobs.wait_pods(name, lambda pods: pods == [], "the preempted job's pods deleted", 90)
    first_run, _ = streamed.communicate(timeout=60)
    suspended = jobs.get(name)
    log.info("first run of %s, to its preemption:\n%s", name, first_run[-2000:])

    jobs.wait_state("urgent", "Running", 120)
    kubectl.tell_to_finish(jobs.namespace, "urgent-worker-0")
    jobs.wait_state("urgent", "Succeeded", 60)
    finished = jobs.wait_state(name, "Succeeded", TRAINING_TIMEOUT)
    second_run = jobs.log(pod, "tensorflow")
    log.info("second run of %s:\n%s", name, second_run[-2500:])
    events = {
        e["reason"]: e["message"]
        for e in sorted(jobs.events(name), key=lambda e: e.get("lastTimestamp") or "")
    }
    log.info("events of %s: %s", name, json.dumps(events, indent=1))
    return Preempted(name, first_run, suspended, finished, second_run, events)


def final_result(run: Preempted) -> dict[str, Any]:
    (result,) = results_in(run.second_run.splitlines())
    assert result["epochs"] == EPOCHS
    assert result["accuracy"] >= result["accuracy_threshold"]
    return result


def test_a_preempted_mwms_job_stops_at_a_checkpoint_and_resumes_from_its_step(
    preempting_queue: tuple[str, str, str], kubectl: Kubectl, namespace: str, kubeconfig: str
) -> None:
    run = preempt_and_resume(
        "digits-mwms.yaml", "worker-0", *preempting_queue, kubectl, TFJobs(kubeconfig, namespace)
    )
    # The trainer's words and the job's status agree on where it stopped.
    backup = BACKUP.search(run.first_run)
    assert backup, "worker 0 wrote the backup on SIGTERM"
    epoch, step = int(backup[1]), int(backup[2])
    assert (epoch - 1) * STEPS_PER_EPOCH < step <= epoch * STEPS_PER_EPOCH
    at_step = f"at step {step} (epoch {epoch})"
    assert "Preempted" in suspended_message(run.suspended)
    assert suspended_message(run.suspended).endswith(
        f"Its replicas stopped with a checkpoint {at_step}."
    )
    checkpoint = run.finished["status"]["checkpoint"]
    assert (checkpoint["step"], checkpoint["epoch"]) == (step, epoch)
    assert checkpoint["resumedAt"] >= checkpoint["stoppedAt"]
    resumed = condition(run.finished, "Suspended")
    assert resumed["reason"] == "TFJobResumed"
    assert resumed["message"].endswith(f"resumed from the checkpoint {at_step}.")
    assert "Preempted" in run.events["TFJobSuspended"]
    assert at_step in run.events["Checkpointed"]
    assert f"from the checkpoint {at_step}" in run.events["TFJobResumed"]

    found = RESUMED.search(run.second_run)
    assert found, "the second run says where it resumed"
    resumed_epoch, resumed_batch = int(found[1]), int(found[2])
    # It resumes at the step after the backup: nothing trained twice, nothing lost.
    assert (resumed_epoch - 1) * STEPS_PER_EPOCH + resumed_batch == step
    result = final_result(run)
    assert result["initial_epoch"] == resumed_epoch - 1
    assert step + result["steps"] == EPOCHS * STEPS_PER_EPOCH
    summary.add(
        PREEMPTIONS,
        f"MWMS: stopped at step {step} (epoch {epoch}), resumed at epoch {resumed_epoch} "
        f"step {resumed_batch}, {result['steps']} steps more of {EPOCHS * STEPS_PER_EPOCH}, "
        f"accuracy {result['accuracy']:.3f}",
    )


def test_a_preempted_pss_job_trains_again_only_its_unfinished_epoch(
    preempting_queue: tuple[str, str, str], kubectl: Kubectl, namespace: str, kubeconfig: str
) -> None:
    run = preempt_and_resume(
        "digits-pss.yaml", "chief-0", *preempting_queue, kubectl, TFJobs(kubeconfig, namespace)
    )
    finished_epochs = [int(found[1]) for found in EPOCH_DONE.finditer(run.first_run)]
    assert finished_epochs, "the coordinator finished an epoch before it was preempted"
    assert "Preempted" in suspended_message(run.suspended)
    restored = RESTORED.search(run.second_run)
    assert restored, "the second run restored a checkpoint"
    step, epoch = int(restored[1]), int(restored[2])
    # The checkpoint of the last epoch the first run finished (or of the one it was
    # finishing, written before its log line): only an unfinished epoch is trained again.
    assert epoch in (finished_epochs[-1], finished_epochs[-1] + 1)
    assert step == epoch * STEPS_PER_EPOCH
    assert f"resumed at epoch {epoch + 1}, step 0" in run.second_run
    assert condition(run.finished, "Suspended")["reason"] == "TFJobResumed"
    result = final_result(run)
    assert result["initial_epoch"] == epoch
    summary.add(
        PREEMPTIONS,
        f"PSS: preempted in epoch {finished_epochs[-1] + 1}, resumed at epoch {epoch + 1} "
        f"from the checkpoint at step {step}, accuracy {result['accuracy']:.3f}",
    )
