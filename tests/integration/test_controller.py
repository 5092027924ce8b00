"""The controller against the real API server, with replicas that run small shell commands.

Each test drives one transition of the TFJob lifecycle through the local cluster's node:
pods are real containers whose exit codes the kubelet reports, exactly as those of
TensorFlow processes would be.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.builders import ending_jobs, shell_replica, tfjob
from support.tfjobs import PodCreations, TFJobs, condition

from harness.operator_process import OperatorProcess

SLEEP = "sleep 3600"
# Exits like a killed process in its first incarnation, then succeeds after a restart.
FLAKY = 'if [ "$GENERATION" = 0 ]; then sleep 1; exit 137; fi; sleep 2'


def test_chief_success_completes_and_deletes_running_workers(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob("chief-ok", {"Chief": shell_replica("sleep 2"), "Worker": shell_replica(SLEEP, 2)})
    )
    running = tfjobs.wait_state("chief-ok", "Running", 60)
    assert running["status"]["replicaStatuses"]["Worker"]["active"] == 2
    services = tfjobs.services("chief-ok")
    assert [s["metadata"]["name"] for s in services] == [
        "chief-ok-chief-0",
        "chief-ok-worker-0",
        "chief-ok-worker-1",
    ]
    assert all(s["spec"]["clusterIP"] == "None" for s in services)
    job = tfjobs.wait_state("chief-ok", "Succeeded", 60)
    assert job["status"]["completionTime"]
    assert condition(job, "Succeeded")["reason"] == "TFJobSucceeded"
    # cleanPodPolicy Running (the default) deletes the workers that never exit.
    pods = tfjobs.wait_pods("chief-ok", lambda p: len(p) == 1, "only the chief's pod left")
    assert pods[0]["metadata"]["name"] == "chief-ok-chief-0"
    assert pods[0]["status"]["phase"] == "Succeeded"
    events = tfjobs.wait_events(
        "chief-ok", ["SuccessfulCreatePod", "SuccessfulDeletePod", "TFJobSucceeded"]
    )
    created = [e["message"] for e in events if e["reason"] == "SuccessfulCreatePod"]
    assert created == ["Created pods chief-ok-chief-0, chief-ok-worker-0, chief-ok-worker-1"]
    deleted = [e["message"] for e in events if e["reason"] == "SuccessfulDeletePod"]
    assert deleted == ["Deleted pods chief-ok-worker-0, chief-ok-worker-1: cleanPodPolicy Running"]
    assert "TFJobSucceeded" in [e["reason"] for e in events]


def test_worker_zero_decides_success_without_a_chief(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob(
            "w0",
            {"Worker": shell_replica('[ "$HOSTNAME" = w0-worker-0 ] && exit 0; sleep 3600', 2)},
        )
    )
    job = tfjobs.wait_state("w0", "Succeeded", 60)
    assert job["status"]["replicaStatuses"]["Worker"]["succeededIndexes"] == [0]


def test_all_workers_policy_waits_for_every_worker(tfjobs: TFJobs) -> None:
    script = '[ "$HOSTNAME" = all-worker-0 ] && exit 0; sleep 6'
    tfjobs.create(tfjob("all", {"Worker": shell_replica(script, 2)}, successPolicy="AllWorkers"))
    first = tfjobs.wait_for(
        "all",
        lambda j: (j.get("status") or {}).get("succeededReplicas") == 1,
        "worker 0 done",
        60,
    )
    assert first["status"]["state"] != "Succeeded"
    job = tfjobs.wait_state("all", "Succeeded", 60)
    assert job["status"]["replicaStatuses"]["Worker"]["succeededIndexes"] == [0, 1]


def test_exit_code_retryable_failure_restarts_the_group(tfjobs: TFJobs) -> None:
    """A MultiWorkerMirroredStrategy-shaped job: one worker dies, all restart together."""
    with PodCreations(tfjobs.kubeconfig, tfjobs.namespace, "group") as creations:
        tfjobs.create(
            tfjob(
                "group",
                {
                    "Chief": shell_replica(
                        '[ "$GENERATION" = 0 ] && exec sleep 3600; sleep 3', policy="ExitCode"
                    ),
                    "Worker": shell_replica(
                        '[ "$HOSTNAME" = group-worker-1 ] || exec sleep 3600; ' + FLAKY,
                        2,
                        "ExitCode",
                    ),
                },
                runPolicy={"backoffLimit": 3},
            )
        )
        job = tfjobs.wait_state("group", "Succeeded", 90)
        time.sleep(1)
    assert job["status"]["restartCount"] == 1
    assert job["status"]["replicaGenerations"] == {"chief-0": 1, "worker-0": 1, "worker-1": 1}
    assert condition(job, "Restarting")["status"] == "False"
    (restart,) = [e for e in tfjobs.events("group") if e["reason"] == "TFJobRestarting"]
    assert restart.get("count") in (None, 1)  # reported once, not counted up by a repeat
    assert "worker-1 exited with code 137" in restart["message"]
    assert "restarting chief-0, worker-0, worker-1" in restart["message"]
    created = sorted((name, generation) for name, generation, _ in creations.added)
    assert created == [
        ("group-chief-0", "0"),
        ("group-chief-0", "1"),
        ("group-worker-0", "0"),
        ("group-worker-0", "1"),
        ("group-worker-1", "0"),
        ("group-worker-1", "1"),
    ]


def test_exit_code_permanent_failure_fails_the_job(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob(
            "perm",
            {
                "Chief": shell_replica(SLEEP, policy="ExitCode"),
                "Worker": shell_replica("sleep 1; exit 3", 1, "ExitCode"),
            },
        )
    )
    job = tfjobs.wait_state("perm", "Failed", 60)
    failed = condition(job, "Failed")
    assert failed["reason"] == "ReplicaFailed"
    assert "worker-0 exited with code 3" in failed["message"]
    assert job["status"]["restartCount"] == 0
    # cleanPodPolicy Running: the chief that was still running is deleted.
    pods = tfjobs.wait_pods("perm", lambda p: len(p) == 1, "the chief deleted")
    assert pods[0]["metadata"]["name"] == "perm-worker-0"
    tfjobs.wait_events("perm", ["ReplicaFailed"])


def test_on_failure_restarts_in_place_until_backoff_limit(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob(
            "backoff",
            {"Worker": shell_replica("sleep 0.5; exit 1", 1, "OnFailure")},
            runPolicy={"backoffLimit": 1},
        )
    )
    job = tfjobs.wait_state("backoff", "Failed", 90)
    failed = condition(job, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "past backoffLimit 1" in failed["message"]


def test_evicted_pod_is_restarted_even_under_never(tfjobs: TFJobs) -> None:
    """The kubelet evicts worker 1 for filling its emptyDir past its sizeLimit."""
    script = (
        '[ "$GENERATION" = 0 ] && [ "$HOSTNAME" = evict-worker-1 ] && '
        "head -c 4194304 /dev/zero > /scratch/fill; "
        '[ "$GENERATION" = 0 ] && exec sleep 3600; sleep 2'
    )
    worker = shell_replica(script, 2, "Never")
    pod = worker["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    pod["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]
    tfjobs.create(tfjob("evict", {"Worker": worker}))
    job = tfjobs.wait_state("evict", "Succeeded", 120)
    assert job["status"]["restartCount"] == 1
    (restart,) = [e for e in tfjobs.events("evict") if e["reason"] == "TFJobRestarting"]
    assert restart.get("count") in (None, 1)  # reported once, not counted up by a repeat
    assert "worker-1 was disrupted (Evicted)" in restart["message"]
    assert "exceeds the limit" in restart["message"]
    assert "restarting worker-0, worker-1" in restart["message"]


def test_ps_job_restarts_a_failed_worker_alone(tfjobs: TFJobs) -> None:
    with PodCreations(tfjobs.kubeconfig, tfjobs.namespace, "psjob") as creations:
        tfjobs.create(
            tfjob(
                "psjob",
                {
                    "Chief": shell_replica(SLEEP, policy="ExitCode"),
                    "PS": shell_replica(SLEEP, policy="ExitCode"),
                    "Worker": shell_replica(
                        '[ "$HOSTNAME" = psjob-worker-1 ] || exec sleep 3600; ' + FLAKY,
                        2,
                        "ExitCode",
                    ),
                },
            )
        )
        job = tfjobs.wait_for(
            "psjob",
            lambda j: (
                (j.get("status") or {}).get("restartCount") == 1
                and j["status"]["state"] == "Running"
            ),
            "one restart, running again",
            60,
        )
        time.sleep(1)
    assert job["status"]["replicaGenerations"] == {"worker-1": 1}
    created = sorted((name, generation) for name, generation, _ in creations.added)
    assert created == [
        ("psjob-chief-0", "0"),
        ("psjob-ps-0", "0"),
        ("psjob-worker-0", "0"),
        ("psjob-worker-1", "0"),
        ("psjob-worker-1", "1"),
    ], "only worker 1 is replaced; the chief, the ps and worker 0 keep running"
    phases = {p["metadata"]["name"]: p["status"]["phase"] for p in tfjobs.pods("psjob")}
    for name in ("psjob-chief-0", "psjob-ps-0", "psjob-worker-0"):
        assert phases[name] == "Running", f"{name} must keep running"


def test_active_deadline_fails_a_job_with_no_other_event(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob(
            "deadline", {"Worker": shell_replica(SLEEP, 2)}, runPolicy={"activeDeadlineSeconds": 4}
        )
    )
    tfjobs.wait_state("deadline", "Running", 60)
    job = tfjobs.wait_state("deadline", "Failed", 30)
    assert condition(job, "Failed")["reason"] == "DeadlineExceeded"
    tfjobs.wait_pods("deadline", lambda p: not p, "running pods deleted")


def test_ttl_deletes_the_finished_job_and_its_children(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob("ttl", {"Worker": shell_replica("exit 0")}, runPolicy={"ttlSecondsAfterFinished": 2})
    )
    tfjobs.wait_state("ttl", "Succeeded", 60)
    tfjobs.wait_gone("ttl", 60)


@pytest.mark.parametrize(
    ("policy", "left"),
    [
        ("All", []),
        ("Running", ["clean-{}-chief-0"]),
        ("None", ["clean-{}-chief-0", "clean-{}-ps-0", "clean-{}-worker-0"]),
    ],
)
def test_clean_pod_policy(tfjobs: TFJobs, policy: str, left: list[str]) -> None:
    name = f"clean-{policy.lower()}"
    tfjobs.create(
        tfjob(
            name,
            {
                "Chief": shell_replica("sleep 2"),
                "PS": shell_replica(SLEEP),
                "Worker": shell_replica(SLEEP),
            },
            runPolicy={"cleanPodPolicy": policy},
        )
    )
    tfjobs.wait_state(name, "Succeeded", 60)
    expected = sorted(p.format(policy.lower()) for p in left)
    pods = tfjobs.wait_pods(
        name,
        lambda pods: (
            sorted(
                p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
            )
            == expected
            and all(not p["metadata"].get("deletionTimestamp") for p in pods)
        ),
        f"pods left: {expected}",
    )
    assert sorted(p["metadata"]["name"] for p in pods) == expected
    services = [s["metadata"]["name"] for s in tfjobs.services(name)]
    if policy == "All":
        assert tfjobs.wait_for(name, lambda _: not tfjobs.services(name), "services deleted")
    elif policy == "None":
        assert len(services) == 3


def test_suspend_deletes_children_and_resume_recreates_them(tfjobs: TFJobs) -> None:
    tfjobs.create(tfjob("pause", {"Worker": shell_replica(SLEEP, 2)}))
    tfjobs.wait_state("pause", "Running", 60)
    first_start = tfjobs.get("pause")["status"]["startTime"]
    tfjobs.patch_spec("pause", {"runPolicy": {"suspend": True}})
    job = tfjobs.wait_state("pause", "Suspended", 30)
    assert condition(job, "Suspended")["status"] == "True"
    tfjobs.wait_pods("pause", lambda p: not p, "pods deleted while suspended")
    assert tfjobs.services("pause") == []
    time.sleep(1.5)
    tfjobs.patch_spec("pause", {"runPolicy": {"suspend": False}})
    job = tfjobs.wait_state("pause", "Running", 60)
    assert condition(job, "Suspended")["status"] == "False"
    assert job["status"]["startTime"] > first_start
    assert len(tfjobs.pods("pause")) == 2
    tfjobs.wait_events("pause", ["TFJobResumed"])


def test_succeeded_pod_deleted_later_is_not_recreated(tfjobs: TFJobs) -> None:
    tfjobs.create(
        tfjob(
            "keep",
            {"Worker": shell_replica('[ "$HOSTNAME" = keep-worker-1 ] && exit 0; sleep 3600', 2)},
            successPolicy="AllWorkers",
        )
    )
    tfjobs.wait_for(
        "keep", lambda j: (j.get("status") or {}).get("succeededReplicas") == 1, "worker 1 done"
    )
    tfjobs.delete_pod("keep-worker-1")
    tfjobs.wait_pods(
        "keep", lambda p: [x["metadata"]["name"] for x in p] == ["keep-worker-0"], "worker 1 gone"
    )
    time.sleep(3)
    assert [p["metadata"]["name"] for p in tfjobs.pods("keep")] == ["keep-worker-0"]
    assert tfjobs.get("keep")["status"]["restartCount"] == 0


def test_deleting_a_tfjob_garbage_collects_its_children(tfjobs: TFJobs) -> None:
    tfjobs.create(tfjob("gc", {"Chief": shell_replica(SLEEP), "Worker": shell_replica(SLEEP, 2)}))
    tfjobs.wait_state("gc", "Running", 60)
    assert len(tfjobs.services("gc")) == 3
    tfjobs.delete("gc")
    tfjobs.wait_gone("gc", 60)


def test_replica_count_change_rerenders_tf_config(tfjobs: TFJobs) -> None:
    tfjobs.create(tfjob("scale", {"Worker": shell_replica(SLEEP, 2)}))
    tfjobs.wait_state("scale", "Running", 60)
    tfjobs.patch_spec("scale", {"tfReplicaSpecs": {"Worker": {"replicas": 3}}})
    pods = tfjobs.wait_pods(
        "scale",
        lambda p: (
            len(p) == 3
            and all(
                x["status"]["phase"] == "Running" and not x["metadata"].get("deletionTimestamp")
                for x in p
            )
        ),
        "three running workers",
    )
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert '"worker":["scale-worker-0.' in env["TF_CONFIG"]
        assert "scale-worker-2." in env["TF_CONFIG"]
    job = tfjobs.wait_state("scale", "Running", 30)
    assert job["status"]["restartCount"] == 0
    events = tfjobs.wait_events("scale", ["ReplicasChanged"])
    assert [e["reason"] for e in events].count("ReplicasChanged") == 1


def test_operator_killed_mid_job_recovers_without_duplicates(
    tfjobs: TFJobs, operator: OperatorProcess
) -> None:
    with PodCreations(tfjobs.kubeconfig, tfjobs.namespace, "crash") as creations:
        tfjobs.create(
            tfjob(
                "crash",
                {
                    "Chief": shell_replica(
                        '[ "$GENERATION" = 0 ] && exec sleep 3600; sleep 4', policy="ExitCode"
                    ),
                    "Worker": shell_replica(
                        '[ "$HOSTNAME" = crash-worker-0 ] || exec sleep 3600; ' + FLAKY,
                        2,
                        "ExitCode",
                    ),
                },
            )
        )
        tfjobs.wait_state("crash", "Running", 60)
        operator.kill()
        time.sleep(2)  # worker-0 fails while no operator runs
        operator.run()
        job = tfjobs.wait_state("crash", "Succeeded", 90)
        operator.kill()
        operator.run()
        time.sleep(2)
    assert creations.duplicates() == []
    assert job["status"]["restartCount"] == 1
    assert tfjobs.get("crash")["status"]["state"] == "Succeeded"
    assert len(creations.added) == 6, creations.added


def _metric_samples(operator: Any) -> dict[str, float]:
    text = operator.metrics()
    assert text is not None, "the operator's metrics do not answer"
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_metrics_count_jobs_pods_and_reconciles(tfjobs: TFJobs, operator: Any) -> None:
    """A job that succeeds, one that fails and one that restarts, counted in the test's
    namespace under Kubeflow's names and the operator's own; one deleted."""
    # The operator is shared by the session: compare with what it had counted before.
    before = _metric_samples(operator)
    jobs = ending_jobs()
    for manifest, _ in jobs.values():
        tfjobs.create(manifest)
    ended = {name: tfjobs.wait_state(name, state, 90) for name, (_, state) in jobs.items()}
    after = _metric_samples(operator)

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    namespace = tfjobs.namespace

    def kubeflow(samples: dict[str, float], what: str) -> float:
        labels = f'framework="tensorflow",job_namespace="{namespace}"'
        return samples.get(f"training_operator_jobs_{what}_total{{{labels}}}", 0.0)

    counted = {what: kubeflow(after, what) for what in ("created", "successful", "failed")}
    assert counted == {"created": 3, "successful": 2, "failed": 1}
    assert kubeflow(after, "restarted") == ended["restarts"]["status"]["restartCount"] == 1
    mine = f'job_namespace="{namespace}"'
    assert after[f'tfjob_operator_jobs{{{mine},state="Succeeded"}}'] == 2
    assert after[f'tfjob_operator_jobs{{{mine},state="Failed"}}'] == 1
    assert after[f'tfjob_operator_restarts_total{{{mine},reason="ExitCode"}}'] == 1
    # Consistent with the conditions: the reason a job ended with is its condition's.
    failed_reason = condition(ended["fails"], "Failed")["reason"]
    assert (
        after[
            f'tfjob_operator_jobs_finished_total{{{mine},reason="{failed_reason}",state="Failed"}}'
        ]
        == 1
    )
    assert after[f'tfjob_operator_job_duration_seconds_count{{{mine},state="Succeeded"}}'] == 2
    # One start each: the restarted job's second run is not a start.
    assert after[f"tfjob_operator_job_start_seconds_count{{{mine}}}"] == 3
    assert grew("tfjob_operator_pods_created_total") == 5  # 2 + 1 + 2 (the restarted pod twice)
    assert grew("tfjob_operator_services_created_total") == 4
    assert grew("tfjob_operator_reconcile_duration_seconds_count") >= 3
    # Where the time went: changes waiting for their reconcile, writes for a slot and for
    # the API server's answer (pods and services created; success decided).
    assert grew("tfjob_operator_queue_wait_seconds_count") >= 3
    assert grew('tfjob_operator_write_duration_seconds_count{priority="child"}') >= 4
    assert grew('tfjob_operator_write_wait_seconds_count{priority="decision"}') >= 1
    assert grew("tfjob_operator_reconcile_errors_total") == 0

    # The log's lines about a job carry it as fields.
    uid = ended["restarts"]["metadata"]["uid"]
    fields = f"[namespace={namespace} name=restarts uid={uid}]"
    restarting = [line for line in operator.log_lines() if "TFJobRestarting: " in line]
    assert [line for line in restarting if line.endswith(fields)], restarting[-3:]

    tfjobs.delete("succeeds")
    tfjobs.wait_gone("succeeds")
    deadline = time.monotonic() + 30
    while kubeflow(_metric_samples(operator), "deleted") < 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    gone = _metric_samples(operator)
    assert kubeflow(gone, "deleted") == 1
    assert gone[f'tfjob_operator_jobs{{{mine},state="Succeeded"}}'] == 1
