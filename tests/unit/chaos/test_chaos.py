"""The chaos harness's pure parts: the jobs it runs, its fault schedule, its checks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

# The harness is not an installed package: it runs from the repository root.
from chaos import clocks, rbac
from chaos.faults import DOWN_SECONDS, Fault, FaultKind, schedule
from chaos.journal import Seen, seen
from chaos.verdict import OperatorFigures, jobs_under_way, judge
from chaos.workload import PERMANENT_EXIT, RETRYABLE_EXIT, ChaosJob, Outcome, plan_jobs
from harness.audit import Request
from tfjob_operator.api import RestartPolicy
from tfjob_operator.failure_policy import is_retryable
from tfjob_operator.observe import Failure
from tfjob_operator.spec import parse_spec

QUIET = OperatorFigures(
    starts=1, reconcile_errors=0, watch_restarts={}, error_lines=[], reconcile_failures=[]
)
COVERAGE = {"pods": {"outages": 0, "relists": 0}}


def test_a_run_mixes_outcomes_at_seeded_moments_within_the_submission_window() -> None:
    jobs = plan_jobs(30, 120, seed=7)
    assert [j.outcome for j in jobs].count(Outcome.RETRIES) == 6
    assert [j.outcome for j in jobs].count(Outcome.FAILS) == 6
    assert all(0 <= j.submit_at <= 120 for j in jobs)
    assert [j.submit_at for j in jobs] == sorted(j.submit_at for j in jobs)
    assert plan_jobs(30, 120, seed=7) == jobs
    assert plan_jobs(30, 120, seed=8) != jobs
    assert len({j.name for j in jobs}) == 30


def test_every_job_is_a_valid_tfjob_with_a_retryable_and_a_permanent_code() -> None:
    for job in plan_jobs(5, 10, seed=1):
        manifest = job.manifest("chaos")
        spec = parse_spec(job.name, manifest["spec"])
        assert [r.restart_policy for r in spec.replica_specs.values()] == [RestartPolicy.EXIT_CODE]
    retryable = Failure(RETRYABLE_EXIT, "Error", "", disrupted=False)
    permanent = Failure(PERMANENT_EXIT, "Error", "", disrupted=False)
    assert is_retryable(RestartPolicy.EXIT_CODE, retryable)
    assert not is_retryable(RestartPolicy.EXIT_CODE, permanent)


def exit_code(job: ChaosJob, pod: str, generation: str) -> int:
    """Runs the job's container command as that pod would."""
    (spec,) = job.manifest("chaos")["spec"]["tfReplicaSpecs"].values()
    command = spec["template"]["spec"]["containers"][0]["command"]
    if pod.endswith("-worker-1"):  # it would sleep an hour: check what it runs instead
        assert "else exec sleep 3600" in command[-1]
        return 0
    env = {**os.environ, "HOSTNAME": pod, "GENERATION": generation}
    return subprocess.run(command, env=env, check=False, timeout=10).returncode


@pytest.mark.parametrize(
    ("outcome", "codes"),
    [
        (Outcome.SUCCEEDS, {"0": 0}),
        (Outcome.FAILS, {"0": PERMANENT_EXIT}),
        (Outcome.RETRIES, {"0": RETRYABLE_EXIT, "1": 0}),
    ],
)
def test_the_leader_exits_as_its_outcome_says(outcome: Outcome, codes: dict[str, int]) -> None:
    job = ChaosJob("chaos-001", outcome, submit_at=0, run_seconds=0)
    for generation, code in codes.items():
        assert exit_code(job, "chaos-001-worker-0", generation) == code
    assert exit_code(job, "chaos-001-worker-1", "0") == 0
    assert job.expected_restarts() == (1 if outcome is Outcome.RETRIES else 0)


@pytest.mark.parametrize(
    ("outcome", "evicted", "restarts"),
    [
        (Outcome.SUCCEEDS, [0], 1),
        (Outcome.FAILS, [0, 1], 2),
        # Generation 0 taken: generation 1 is the retry, and succeeds.
        (Outcome.RETRIES, [0], 1),
        # Generation 0 failed as planned; its retry was taken, then the next succeeded.
        (Outcome.RETRIES, [1], 2),
    ],
)
def test_each_generation_a_lost_node_took_is_one_more_restart(
    outcome: Outcome, evicted: list[int], restarts: int
) -> None:
    assert ChaosJob("chaos-001", outcome, 0, 0).expected_restarts(evicted) == restarts


def test_the_schedule_has_each_kind_as_often_as_asked_within_its_ranges() -> None:
    planned = schedule(3, (5, 20), seed=3)
    assert sorted(p.kind for p in planned) == sorted(list(FaultKind) * 3)
    for fault in planned:
        low, high = DOWN_SECONDS[fault.kind]
        assert low <= fault.down <= high
        assert 5 <= fault.gap <= 20
    assert schedule(3, (5, 20), seed=3) == planned


def test_seen_keeps_what_the_checks_read() -> None:
    pod = {
        "metadata": {
            "name": "chaos-001-worker-0",
            "uid": "u1",
            "labels": {"tfjob.dev/job-name": "chaos-001", "tfjob.dev/replica-generation": "1"},
            "deletionTimestamp": "2026-11-24T00:00:00Z",
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 130}}}],
        },
    }
    assert seen(1.23456, "pods", "MODIFIED", pod) == Seen(
        1.235,
        "pods",
        "MODIFIED",
        "chaos-001-worker-0",
        "u1",
        "chaos-001",
        "Running",
        0,
        "1",
        True,
        exit_code=130,
    )
    job = {
        "metadata": {"name": "chaos-001", "uid": "j"},
        "status": {"state": "Succeeded", "restartCount": 1},
    }
    record = seen(2, "tfjobs", "ADDED", job)
    assert (record.job, record.state, record.restarts, record.deleting) == (
        "chaos-001",
        "Succeeded",
        1,
        False,
    )


def test_seen_keeps_why_a_pod_was_taken_and_why_its_job_restarts() -> None:
    evicted = {
        "metadata": {"name": "chaos-001-worker-1", "uid": "u2"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "NodeNotReady"},
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                },
            ],
        },
    }
    assert seen(1, "pods", "MODIFIED", evicted).disruption == "DeletionByTaintManager"
    restarting = {"type": "Restarting", "status": "True", "reason": "TFJobRestarting"}
    job = {
        "metadata": {"name": "chaos-001", "uid": "j"},
        "status": {"state": "Restarting", "conditions": [{**restarting, "message": "why"}]},
    }
    assert seen(1, "tfjobs", "MODIFIED", job).restarting == "TFJobRestarting: why"
    over = {**job, "status": {"conditions": [{**restarting, "status": "False"}]}}
    assert seen(1, "tfjobs", "MODIFIED", over).restarting == ""


JOB = ChaosJob("chaos-001", Outcome.RETRIES, submit_at=0, run_seconds=10)


def job_seen(at: float, state: str, restarts: int = 0, event: str = "MODIFIED") -> Seen:
    return Seen(at, "tfjobs", event, "chaos-001", "job-uid", "chaos-001", state, restarts)


def pod_seen(
    at: float,
    uid: str,
    phase: str,
    generation: str,
    index: int = 0,
    exit_code: int | None = None,
    disruption: str = "",
) -> Seen:
    name = f"chaos-001-worker-{index}"
    return Seen(
        at,
        "pods",
        "MODIFIED",
        name,
        uid,
        "chaos-001",
        phase,
        0,
        generation,
        deleting=bool(disruption),
        exit_code=exit_code,
        disruption=disruption,
    )


def a_good_run() -> list[Seen]:
    return [
        job_seen(1, "Created", event="ADDED"),
        pod_seen(2, "p0", "Running", "0"),
        pod_seen(2, "p1", "Running", "0", index=1),
        job_seen(3, "Running"),
        pod_seen(12, "p0", "Failed", "0"),
        job_seen(13, "Restarting", 1),
        pod_seen(14, "p0b", "Running", "1"),
        job_seen(15, "Running", 1),
        # The kubelet shows the exit code first, the phase once the sandbox is gone.
        pod_seen(24.5, "p0b", "Running", "1", exit_code=0),
        job_seen(25, "Succeeded", 1),
        pod_seen(26, "p0b", "Succeeded", "1", exit_code=0),
    ]


def verdict_of(records: list[Seen], **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "jobs": [JOB],
        "records": records,
        "faults": [Fault(FaultKind.ETCD_RESTART, 20, 26)],
        "leftovers": {"pods": [], "services": []},
        "operator": QUIET,
        "requests": [],
        "coverage": COVERAGE,
        "wall_seconds": 40,
        "started_at": 80.0,
    } | overrides
    return judge(**arguments)


def test_a_run_where_every_job_ends_as_its_replicas_imply_passes() -> None:
    verdict = verdict_of(a_good_run())
    assert verdict.ok, verdict.table()
    (job,) = verdict.jobs
    assert (job.settled_at, job.lag, job.faults_during_lag) == (25, 0.5, ["etcd-restart"])
    assert verdict.table().endswith("PASS")
    assert verdict.as_json()["fault_counts"]["etcd-restart"] == 1


def test_a_fault_meets_the_jobs_seen_before_it_ended_and_not_ended_before_it_began() -> None:
    records = a_good_run()  # chaos-001, seen at 1, Succeeded at 25
    met = {
        (began, ended): jobs_under_way(Fault(FaultKind.ETCD_RESTART, began, ended), records)
        for began, ended in [(0, 0.5), (0, 1), (20, 26), (25, 30), (25.5, 30)]
    }
    assert met == {
        (0, 0.5): [],
        (0, 1): ["chaos-001"],
        (20, 26): ["chaos-001"],
        (25, 30): ["chaos-001"],
        (25.5, 30): [],
    }
    verdict = verdict_of(
        records,
        faults=[Fault(FaultKind.ETCD_RESTART, 20, 26), Fault(FaultKind.KUBELET_RESTART, 31, 32)],
    )
    assert verdict.jobs_met == [1, 0]
    label = "faults that met a job under way"
    (row,) = (line for line in verdict.table().splitlines() if line.startswith(label))
    assert row.removeprefix(label).strip() == "1 of 2; none under way: kubelet-restart at 31 s"


def test_a_terminal_state_shown_otherwise_later_is_lost() -> None:
    verdict = verdict_of([*a_good_run(), job_seen(30, "Running", 1)])
    assert verdict.lost_terminal_states == [
        {"job": "chaos-001", "was": "Succeeded", "at": 25, "then": "Running", "then_at": 30}
    ]
    assert not verdict.ok
    assert verdict.table().endswith("FAIL")


def test_a_pod_made_for_a_replica_after_it_succeeded_is_a_rerun() -> None:
    verdict = verdict_of([*a_good_run(), pod_seen(27, "p0c", "Pending", "2")])
    assert verdict.reruns_after_success == [
        {"pod": "chaos-001-worker-0", "generation": "2", "at": 27, "succeeded_at": 24.5}
    ]
    assert not verdict.ok


def test_a_pod_ending_well_after_its_lost_node_had_it_deleted_is_no_success() -> None:
    run = a_good_run()[:4]
    lost = [
        pod_seen(5, "p0", "Running", "0", disruption="DeletionByTaintManager"),
        job_seen(6, "Restarting", 1),
        pod_seen(9, "p0", "Succeeded", "0", exit_code=0, disruption="DeletionByTaintManager"),
        pod_seen(10, "p0b", "Pending", "1"),
    ]
    assert verdict_of([*run, *lost]).reruns_after_success == []
    ended_then_lost = [
        pod_seen(5, "p0", "Succeeded", "0", exit_code=0),
        pod_seen(6, "p0", "Succeeded", "0", exit_code=0, disruption="DeletionByTaintManager"),
        pod_seen(10, "p0b", "Pending", "1"),
    ]
    assert verdict_of([*run, *ended_then_lost]).reruns_after_success == [
        {"pod": "chaos-001-worker-0", "generation": "1", "at": 10, "succeeded_at": 5}
    ]


def test_two_pods_of_one_replica_and_generation_are_duplicates() -> None:
    verdict = verdict_of([*a_good_run()[:3], pod_seen(4, "p1-again", "Pending", "0", index=1)])
    assert verdict.duplicate_pods == [
        {"pod": "chaos-001-worker-1", "generation": "0", "first_seen": [2, 4]}
    ]


def test_a_wrong_restart_count_or_end_state_or_a_leftover_fails_the_run() -> None:
    records = a_good_run()
    records[-2] = job_seen(25, "Succeeded", 2)
    wrong = verdict_of(records)
    assert [j.name for j in wrong.wrong_jobs] == ["chaos-001"]
    (line,) = [x for x in wrong.table().splitlines() if x.startswith("restartCount not as")]
    assert line.endswith(" 1 (chaos-001)")
    stuck = verdict_of([r for r in a_good_run() if r.state != "Succeeded"])
    assert stuck.jobs[0].state == "Running"
    assert stuck.jobs[0].lag is None
    left = verdict_of(a_good_run(), leftovers={"pods": ["chaos-001-worker-1"], "services": []})
    assert not left.ok
    assert left.leftovers == {"pods": ["chaos-001-worker-1"], "services": []}


EVICTED = "DeletionByTaintManager"
RESTARTING = f"TFJobRestarting: chaos-001-worker-0 was disrupted ({EVICTED}): Taint manager"
NODE_LOST = Fault(FaultKind.NODE_LOSS, 5, 60)


def a_node_loss_run(restarting: str = RESTARTING) -> list[Seen]:
    """Generation 0 is taken by the lost node before its leader fails: generation 1 is the
    retry, and succeeds."""
    return [
        job_seen(1, "Created", event="ADDED"),
        pod_seen(2, "p0", "Running", "0"),
        pod_seen(2, "p1", "Running", "0", index=1),
        job_seen(3, "Running"),
        pod_seen(40, "p0", "Running", "0", disruption=EVICTED),
        pod_seen(40, "p1", "Running", "0", index=1, disruption=EVICTED),
        Seen(
            41,
            "tfjobs",
            "MODIFIED",
            "chaos-001",
            "job-uid",
            "chaos-001",
            "Restarting",
            1,
            restarting=restarting,
        ),
        # Once the node is back, its kubelet ends the evicted pods' containers.
        pod_seen(62, "p0", "Failed", "0", exit_code=137, disruption=EVICTED),
        pod_seen(64, "p0b", "Running", "1"),
        pod_seen(80, "p0b", "Running", "1", exit_code=0),
        job_seen(81, "Succeeded", 1),
    ]


def test_a_job_restarted_once_for_the_generation_a_lost_node_took_passes() -> None:
    verdict = verdict_of(a_node_loss_run(), faults=[NODE_LOST])
    (job,) = verdict.jobs
    assert (job.evicted_generations, job.expected_restarts, job.explained) == ([0], 1, True)
    assert verdict.evictions_without_node_loss == []
    assert verdict.ok, verdict.table()


def test_a_job_that_does_not_say_its_pods_were_evicted_fails() -> None:
    verdict = verdict_of(a_node_loss_run("TFJobRestarting: restarting"), faults=[NODE_LOST])
    assert verdict.jobs[0].explained is False
    assert not verdict.ok
    (line,) = [x for x in verdict.table().splitlines() if x.startswith("jobs restarted by")]
    assert line.endswith("1, not saying why: 1 (chaos-001)")


def test_an_eviction_while_no_node_is_lost_fails_the_run() -> None:
    verdict = verdict_of(a_node_loss_run(), faults=[Fault(FaultKind.ETCD_RESTART, 20, 26)])
    assert [e["pod"] for e in verdict.evictions_without_node_loss] == [
        "chaos-001-worker-0",
        "chaos-001-worker-1",
    ]
    assert not verdict.ok


def test_an_eviction_after_the_leader_exited_is_no_restart() -> None:
    records = [
        *a_good_run(),
        pod_seen(30, "p1b", "Running", "1", index=1, disruption=EVICTED),
    ]
    verdict = verdict_of(records, faults=[Fault(FaultKind.NODE_LOSS, 28, 60)])
    (job,) = verdict.jobs
    assert (job.evicted_generations, job.expected_restarts, job.explained) == ([], 1, None)
    assert verdict.ok, verdict.table()


def write(
    user: str, at: float, resource: str = "pods", code: int = 201, verb: str = "create"
) -> Request:
    """An operator's write as the audit log records it."""
    return Request(user, "ResponseComplete", verb, resource, "", "chaos", "x", code, at, at)


def test_a_takeover_is_timed_from_the_audit_log_and_the_old_leader_writes_no_more() -> None:
    requests = [
        write("operator-1", 100.0, "leases", 201),  # creates the Lease: leads
        write("operator-1", 101.0),
        write("operator-1", 102.0, "leases", 200, "update"),  # renews
        # Fault at 103: operator-1 frozen; operator-2 takes the Lease at 118.
        write("operator-2", 118.0, "leases", 200, "update"),
        write("operator-2", 118.1, "events"),
        write("operator-2", 119.5, "tfjobs", 200, "patch"),
    ]
    fault = Fault(FaultKind.LEADER_PAUSE, 3, 28, leader="operator-1", leader_gone=103.0)
    verdict = verdict_of(a_good_run(), faults=[fault], requests=requests)
    assert verdict.ok, verdict.table()
    (takeover,) = verdict.takeovers
    assert (takeover.new, takeover.lease_taken, takeover.first_write) == ("operator-2", 15.0, 16.5)
    assert "writes by a deposed leader" in verdict.table()


def test_a_write_by_a_deposed_leader_fails_the_run_and_a_renewal_refused_does_not() -> None:
    requests = [
        write("operator-1", 100.0, "leases", 201),
        write("operator-2", 118.0, "leases", 200, "update"),
        write("operator-1", 120.0, "leases", 409, "update"),  # its renewal, refused
        write("operator-1", 120.2, "tfjobs", 200, "patch"),  # a write it should not send
    ]
    fault = Fault(FaultKind.LEADER_PAUSE, 3, 28, leader="operator-1", leader_gone=103.0)
    verdict = verdict_of(a_good_run(), faults=[fault], requests=requests)
    assert not verdict.ok
    (deposed,) = verdict.deposed_writes
    assert (deposed["user"], deposed["holder"]) == ("operator-1", "operator-2")
    assert deposed["request"] == "patch tfjobs chaos/x"


def test_a_leader_gone_with_no_standby_taking_over_fails_the_run() -> None:
    requests = [write("operator-1", 100.0, "leases", 201)]
    fault = Fault(FaultKind.LEADER_KILL, 3, 5, leader="operator-1", leader_gone=103.0)
    verdict = verdict_of(a_good_run(), faults=[fault], requests=requests)
    assert not verdict.ok
    assert verdict.takeovers[0].new is None


def test_a_request_the_charts_roles_refuse_fails_the_run_and_a_throttled_one_is_counted() -> None:
    requests = [
        write("operator-1", 100.0, "leases", 201),
        write("operator-1", 101.0, "pods", 429),
        write("operator-1", 101.5, "pods", 429),
        write("operator-1", 102.0, "tfjobs", 429, "patch"),
    ]
    throttled = verdict_of(a_good_run(), requests=requests)
    assert throttled.ok, throttled.table()
    assert throttled.throttled == {"create pods": 2, "patch tfjobs": 1}
    (row,) = [line for line in throttled.table().splitlines() if "throttled (429)" in line]
    assert row.endswith("  3: create pods 2, patch tfjobs 1")
    forbidden = verdict_of(a_good_run(), requests=[*requests, write("operator-1", 103.0, code=403)])
    assert not forbidden.ok
    assert [f["request"] for f in forbidden.forbidden] == ["create pods chaos/x"]
    # While a restarted API server starts (run seconds 20-26 and 2 more), its authorizer has
    # not read the roles yet: its refusals then are not the chart's.
    restart = Fault(FaultKind.APISERVER_RESTART, 20, 26)
    starting = [write("operator-1", 80.0 + t, code=403) for t in (21.0, 27.5)]
    assert verdict_of(a_good_run(), requests=starting, faults=[restart]).ok
    late = write("operator-1", 80.0 + 28.5, code=403)
    assert not verdict_of(a_good_run(), requests=[*starting, late], faults=[restart]).ok


def test_the_operators_get_the_charts_own_roles_bound_to_their_group() -> None:
    documents = [d for d in yaml.safe_load_all(rbac.INSTALL.read_text()) if d]
    granted = {(o["kind"], o["metadata"]["name"]): o for o in rbac.operator_rbac(documents, "ops")}
    assert sorted(granted) == [
        ("ClusterRole", "tfjob-operator"),
        ("ClusterRoleBinding", "tfjob-operator"),
        ("Role", "tfjob-operator-leader-election"),
        ("RoleBinding", "tfjob-operator-leader-election"),
    ]
    chart = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    assert granted["ClusterRole", "tfjob-operator"] == chart["ClusterRole", "tfjob-operator"]
    for binding in (
        ("ClusterRoleBinding", "tfjob-operator"),
        (
            "RoleBinding",
            "tfjob-operator-leader-election",
        ),
    ):
        subjects = granted[binding]["subjects"]
        assert subjects[:-1] == chart[binding]["subjects"]  # the ServiceAccount, as shipped
        assert subjects[-1] == {
            "kind": "Group",
            "name": "ops",
            "apiGroup": "rbac.authorization.k8s.io",
        }


def test_a_generation_whose_pods_could_not_start_is_one_more_restart() -> None:
    """Its leader's script never ran (the runtime's StartError, 128): generation 1 runs as
    the retry and succeeds, after one restart in all."""
    records = [
        job_seen(1, "Created", event="ADDED"),
        pod_seen(2, "p0", "Pending", "0"),
        pod_seen(9, "p0", "Failed", "0", exit_code=128),
        job_seen(10, "Restarting", 1),
        pod_seen(11, "p0b", "Running", "1"),
        pod_seen(40, "p0b", "Running", "1", exit_code=0),
        job_seen(41, "Succeeded", 1),
    ]
    verdict = verdict_of(records)
    (job,) = verdict.jobs
    assert (job.unstarted_generations, job.expected_restarts) == ([0], 1)
    assert verdict.ok, verdict.table()
    # A second restart no failure explains is still one too many.
    extra = [*records[:-1], job_seen(41, "Succeeded", 2)]
    assert not verdict_of(extra).ok


def test_what_libfaketime_left_for_killed_processes_is_removed(tmp_path: Path) -> None:
    for name in ("faketime_shm_41", "sem.faketime_sem_41", "faketime_shm_42", "other"):
        (tmp_path / name).write_bytes(b"x")
    clocks.remove_leftovers([41, 43], shm=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["faketime_shm_42", "other"]
