"""Gang scheduling: which jobs are gang-scheduled, their PodGroups and pods, and the
decisions and writes around them (tfjob_operator.integrations.gang)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from support.builders import (
    JOB,
    NOW,
    decide_observing,
    job_view,
    pod,
    pod_group_writes,
    replica_spec,
)

from tfjob_operator import quantity
from tfjob_operator.api import ReplicaType
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.integrations.gang import (
    SCHEDULER_PLUGINS,
    SCHEDULER_PLUGINS_NAME,
    USUAL_GANG_SCHEDULERS,
    VOLCANO,
    GangSchedulers,
    GangScheduling,
    PodGroupWrites,
    gate,
    job_gang,
    join_gang,
    released,
    render_pod_group,
    why_waiting,
)
from tfjob_operator.integrations.gang import observation as gang_observation
from tfjob_operator.observe import PodGroupObservation, observe_pod_group
from tfjob_operator.render import render_pod
from tfjob_operator.spec import InvalidSpec, Replica, parse_spec

from .test_controller import KEY, Harness

PLUGINS = "scheduler-plugins-scheduler"


def gang_spec(
    scheduler: str | None = PLUGINS, workers: int = 2, ps: int = 0, **policy: Any
) -> dict[str, Any]:
    def spec_of(replicas: int) -> dict[str, Any]:
        spec = replica_spec(replicas)
        if scheduler:
            spec["template"]["spec"]["schedulerName"] = scheduler
        return spec

    replicas = {"Worker": spec_of(workers)}
    if ps:
        replicas["PS"] = spec_of(ps)
    out: dict[str, Any] = {"tfReplicaSpecs": replicas}
    if policy:
        out["runPolicy"] = {"schedulingPolicy": policy}
    return out


def errors(spec: dict[str, Any], schedulers: GangSchedulers | None = None) -> str:
    with pytest.raises(InvalidSpec) as raised:
        job_gang(parse_spec("mnist", spec), schedulers or USUAL_GANG_SCHEDULERS)
    return "; ".join(raised.value.errors)


def test_a_job_naming_no_gang_scheduler_is_not_gang_scheduled() -> None:
    assert job_gang(parse_spec("mnist", gang_spec(None)), USUAL_GANG_SCHEDULERS) is None
    assert job_gang(parse_spec("mnist", gang_spec("my-scheduler")), USUAL_GANG_SCHEDULERS) is None


def test_gang_options_without_a_gang_scheduler_are_an_error_that_says_what_to_do() -> None:
    message = errors(gang_spec(None, minAvailable=1))
    assert message.startswith(
        "spec.runPolicy.schedulingPolicy.minAvailable: needs a gang scheduler, but the replicas "
        "name no scheduler and the operator has no --gang-scheduler-name"
    )
    assert "scheduler-plugins-scheduler (scheduler-plugins), volcano (Volcano)" in message
    unknown = errors(gang_spec("my-scheduler", queue="research"))
    assert "queue: needs a gang scheduler, but the replicas name my-scheduler" in unknown


def test_a_gang_has_one_scheduler() -> None:
    spec = gang_spec(workers=2)
    spec["tfReplicaSpecs"]["PS"] = replica_spec(1)
    assert errors(spec) == (
        "spec.tfReplicaSpecs.PS.template.spec.schedulerName: default-scheduler, but the job's "
        "other replicas are gang-scheduled by scheduler-plugins-scheduler: a gang has one "
        "scheduler"
    )


def test_options_the_chosen_scheduler_lacks_are_errors() -> None:
    assert "queue: scheduler-plugins has no queues" in errors(gang_spec(queue="research"))
    assert "scheduleTimeoutSeconds: Volcano's PodGroup has no schedule timeout" in errors(
        gang_spec("volcano", scheduleTimeoutSeconds=30)
    )


def test_scheduler_plugins_pod_group_and_pods() -> None:
    spec = parse_spec("mnist", gang_spec(minResources={"cpu": "3"}, scheduleTimeoutSeconds=30))
    gang = job_gang(spec, USUAL_GANG_SCHEDULERS)
    assert gang is not None
    assert gang.api is SCHEDULER_PLUGINS
    group = render_pod_group(JOB, gang)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["metadata"]["name"] == "mnist"
    assert group["metadata"]["labels"]["tfjob.dev/controller-uid"] == JOB.uid
    assert group["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    assert group["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "3"},
        "scheduleTimeoutSeconds": 30,
    }
    worker_replica = Replica(spec.leader().type, 1)  # type: ignore[union-attr]
    worker = render_pod(JOB, spec, worker_replica, 0)
    join_gang(worker, JOB.name, worker_replica, gang)
    assert worker["spec"]["schedulerName"] == PLUGINS
    assert worker["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mnist"
    assert "annotations" not in worker["metadata"]


def test_volcano_pod_group_counts_each_replica_type_and_names_the_queue() -> None:
    spec = parse_spec("mnist", gang_spec("volcano", ps=1, queue="research", priorityClass="high"))
    gang = job_gang(spec, USUAL_GANG_SCHEDULERS)
    assert gang is not None
    assert gang.api is VOLCANO
    group = render_pod_group(JOB, gang)
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {
        "minMember": 3,
        "minTaskMember": {"worker": 2, "ps": 1},
        "queue": "research",
        "priorityClassName": "high",
    }
    ps_replica = Replica(list(spec.replica_specs)[1], 0)
    ps = render_pod(JOB, spec, ps_replica, 0)
    join_gang(ps, JOB.name, ps_replica, gang)
    assert ps["metadata"]["annotations"] == {
        "scheduling.k8s.io/group-name": "mnist",
        "volcano.sh/task-spec": "ps",
    }
    assert ps["spec"]["priorityClassName"] == "high"
    assert "scheduling.x-k8s.io/pod-group" not in ps["metadata"]["labels"]


def test_min_available_below_the_job_leaves_the_task_counts_out() -> None:
    spec = parse_spec("mnist", gang_spec("volcano", workers=3, minAvailable=2))
    gang = job_gang(spec, USUAL_GANG_SCHEDULERS)
    assert gang is not None
    # Volcano's default queue when the job names none, as Kubeflow and Volcano's webhook set it.
    assert render_pod_group(JOB, gang)["spec"] == {"minMember": 2, "queue": "default"}


def test_the_operators_default_gang_scheduler_takes_the_jobs_that_name_none() -> None:
    schedulers = GangSchedulers.configure("scheduler-plugins")  # Kubeflow's value
    assert schedulers.default == PLUGINS
    gang = job_gang(parse_spec("mnist", gang_spec(None)), schedulers)
    assert gang is not None
    assert gang.scheduler_name == PLUGINS
    assert job_gang(parse_spec("mnist", gang_spec("default-scheduler")), schedulers) is None
    custom = GangSchedulers.configure("coscheduler", scheduler_plugins_name="coscheduler")
    assert job_gang(parse_spec("mnist", gang_spec(None)), custom) is not None
    with pytest.raises(ValueError, match="'kube-batch' is not a gang scheduler"):
        GangSchedulers.configure("kube-batch")


def observed_group(
    owner: str = JOB.uid, api_version: str = SCHEDULER_PLUGINS.api_version, **spec: Any
) -> PodGroupObservation:
    return observe_pod_group(
        {
            "apiVersion": api_version,
            "metadata": {
                "name": "mnist",
                "uid": f"pg-{owner}",
                "ownerReferences": [{"controller": True, "uid": owner}],
            },
            "spec": spec or {"minMember": 2},
        }
    )


def test_a_new_gang_jobs_pods_wait_until_the_watch_shows_its_pod_group() -> None:
    """The scheduler's own PodGroup cache may lag the pods' events: a pod seen before its
    PodGroup would be parked as unschedulable."""
    plan = decide_observing(job_view(gang_spec()), [], [], NOW)
    group = pod_group_writes(plan).create
    assert group is not None
    assert group["spec"] == {"minMember": 2}
    assert plan.create_pods == ()
    assert len(plan.create_services) == 2  # services do not wait

    shown = decide_observing(job_view(gang_spec()), [], [], NOW, pod_groups=[observed_group()])
    assert pod_group_writes(shown).create is None
    assert len(shown.create_pods) == 2
    assert all(p.render()["spec"]["schedulerName"] == PLUGINS for p in shown.create_pods)


def test_pods_wait_while_an_earlier_jobs_pod_group_of_the_name_is_going() -> None:
    plan = decide_observing(
        job_view(gang_spec()), [], [], NOW, pod_groups=[observed_group("uid-old")]
    )
    assert pod_group_writes(plan).create is None
    assert plan.create_pods == ()
    assert plan.create_services  # services do not wait


def test_a_pod_group_follows_the_replica_count_and_new_pods_wait_for_the_change() -> None:
    plan = decide_observing(
        job_view(gang_spec(workers=3)), [], [], NOW, pod_groups=[observed_group()]
    )
    assert pod_group_writes(plan).create is None
    change = pod_group_writes(plan).patch
    assert change is not None
    assert change[1] == {"spec": {"minMember": 3}}
    assert plan.create_pods == ()
    same = decide_observing(job_view(gang_spec()), [], [], NOW, pod_groups=[observed_group()])
    assert pod_group_writes(same).patch is None


def test_no_pods_while_the_gang_is_larger_than_the_job_then_all_once_lowered() -> None:
    """Kubeflow accepts minAvailable above the replica count; no pod could be placed, and
    one the scheduler judged against minMember 10 would stay parked once it is lowered."""
    large = gang_spec(workers=1, minAvailable=10)
    group = observed_group(minMember=10)
    waiting = decide_observing(job_view(large), [], [], NOW, pod_groups=[group])
    assert (waiting.create_pods, pod_group_writes(waiting).patch) == ((), None)
    assert [s.name for s in waiting.create_services] == ["mnist-worker-0"]

    lowered = gang_spec(workers=1, minAvailable=1)
    patched = decide_observing(job_view(lowered), [], [], NOW, pod_groups=[group])
    change = pod_group_writes(patched).patch
    assert change is not None
    assert change[1] == {"spec": {"minMember": 1}}
    assert patched.create_pods == ()
    shown = decide_observing(
        job_view(lowered), [], [], NOW, pod_groups=[observed_group(minMember=1)]
    )
    assert [p.name for p in shown.create_pods] == ["mnist-worker-0"]


def test_the_pod_group_goes_when_the_job_finishes_or_is_suspended() -> None:
    spec = gang_spec()
    succeeded = decide_observing(
        job_view(spec),
        [pod(spec, "worker-0", "Succeeded", exit_code=0), pod(spec, "worker-1")],
        [],
        NOW,
        pod_groups=[observed_group(), observed_group("uid-old")],
    )
    assert succeeded.status is not None
    assert succeeded.status["state"] == "Succeeded"
    assert [(g.uid, why) for g, why in pod_group_writes(succeeded).delete] == [
        (f"pg-{JOB.uid}", "the TFJob has finished")
    ]
    suspended_spec = {**spec, "runPolicy": {"suspend": True}}
    suspended = decide_observing(
        job_view(suspended_spec), [], [], NOW, pod_groups=[observed_group()]
    )
    assert [why for _, why in pod_group_writes(suspended).delete] == ["the TFJob is suspended"]
    assert pod_group_writes(suspended).create is None
    left = decide_observing(job_view(gang_spec(None)), [], [], NOW, pod_groups=[observed_group()])
    assert [why for _, why in pod_group_writes(left).delete] == [
        "the TFJob is not gang-scheduled by it any more"
    ]


def test_an_unplaceable_gang_is_reported_with_the_schedulers_reason() -> None:
    spec = gang_spec()
    unschedulable = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "rejected due to timeout after waiting 10s at plugin Coscheduling",
            }
        ]
    }
    pending = [pod(spec, f"worker-{i}", "Pending", status=unschedulable) for i in (0, 1)]
    plan = decide_observing(job_view(spec), pending, [], NOW, pod_groups=[observed_group()])
    assert plan.status is not None
    running = next(c for c in plan.status["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "GangUnschedulable")
    assert running["message"] == (
        "The gang cannot be placed (PodGroup mnist (scheduler-plugins, 2 pods together)): "
        "worker-0 is pending: Unschedulable: rejected due to timeout after waiting 10s at "
        "plugin Coscheduling"
    )
    assert [e.reason for e in plan.events] == ["GangUnschedulable"]

    volcano_spec = gang_spec("volcano")
    said = volcano_group("Pending", "2/2 tasks unschedulable")
    pending = [pod(volcano_spec, "worker-0", "Pending", status=unschedulable)]
    volcano = decide_observing(job_view(volcano_spec), pending, [], NOW, pod_groups=[said])
    assert volcano.status is not None
    message = next(c for c in volcano.status["conditions"] if c["type"] == "Running")["message"]
    assert message.endswith("(Volcano, 2 pods together)): 2/2 tasks unschedulable")


def test_a_gang_the_operator_cannot_honour_fails_the_job() -> None:
    plan = decide_observing(job_view(gang_spec(queue="research")), [], [], NOW)
    assert plan.status is not None
    assert plan.status["state"] == "Failed"
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "scheduler-plugins has no queues" in failed["message"]
    assert (plan.create_pods, pod_group_writes(plan).create) == ((), None)


def test_the_controller_creates_the_pod_group_then_the_pods_once_it_is_seen() -> None:
    harness = Harness()
    harness.job(version="2", spec=gang_spec())
    harness.reconcile()
    assert harness.calls("create podgroup") == [("create podgroup", "mnist")]
    assert harness.calls("create pod") == []
    (event,) = [e for e in harness.writes.events if e["reason"] == "SuccessfulCreatePodGroup"]
    assert event["message"] == (
        "Created PodGroup mnist (scheduling.x-k8s.io/v1alpha1) for its 2 pods: "
        "they are placed together"
    )
    harness.caches.integrations["gang"].put("pg", KEY, observed_group())
    harness.reconcile()
    assert sorted(n for _, n in harness.calls("create pod")) == ["mnist-worker-0", "mnist-worker-1"]
    assert harness.calls("create podgroup") == [("create podgroup", "mnist")]


def test_no_pod_is_created_when_the_pod_group_api_is_not_served() -> None:
    harness = Harness()
    harness.job(version="2", spec=gang_spec("volcano"))
    harness.writes.refuse_create = ApiError(404, "create podgroup ml/mnist", b"not found")
    with pytest.raises(ApiError):
        harness.reconcile_raising()
    assert harness.calls("create pod") == []
    (event,) = [e for e in harness.writes.events if e["reason"] == "FailedCreatePodGroup"]
    assert event["message"].startswith(
        "scheduling.volcano.sh/v1beta1 is not served: is its gang scheduler installed?"
    )


def test_a_volcano_gang_of_the_whole_job_states_what_its_pods_request_together() -> None:
    spec = gang_spec("volcano", workers=3)
    resources = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = resources
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "logger", "image": "busybox", "resources": {"requests": {"cpu": "0.25"}}}
    )
    gang = job_gang(parse_spec("mnist", spec), USUAL_GANG_SCHEDULERS)
    assert gang is not None
    assert gang.min_resources == {"cpu": "2250m", "memory": "3221225472", "nvidia.com/gpu": "3"}
    given = job_gang(
        parse_spec("mnist", {**spec, **gang_spec(workers=3, minResources={"cpu": "1"})}),
        USUAL_GANG_SCHEDULERS,
    )
    assert given is not None
    assert given.min_resources == {"cpu": "1"}
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = PLUGINS
    plugins = job_gang(parse_spec("mnist", spec), USUAL_GANG_SCHEDULERS)
    assert plugins is not None
    assert plugins.min_resources is None  # see job_requests
    spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "volcano"
    partial = {**spec, "runPolicy": {"schedulingPolicy": {"minAvailable": 2}}}
    part = job_gang(parse_spec("mnist", partial), USUAL_GANG_SCHEDULERS)
    assert part is not None
    assert part.min_resources is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("1Ki", "1024"),
        ("1e3", "1000"),
        ("1.5G", "1500000000"),
        (".5", "0.5"),
    ],
)
def test_quantities_parse_exactly(text: str, value: str) -> None:
    assert quantity.parse(text) == Decimal(value)


def test_a_quantity_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity.parse("1 core")


def volcano_group(
    phase: str, message: str = "2/2 tasks in gang unschedulable"
) -> PodGroupObservation:
    condition = {"type": "Unschedulable", "status": "True", "message": message}
    return observe_pod_group(
        {
            "apiVersion": VOLCANO.api_version,
            "metadata": {
                "name": "mnist",
                "uid": "pg",
                "ownerReferences": [{"controller": True, "uid": JOB.uid}],
            },
            "spec": {"minMember": 2, "minTaskMember": {"worker": 2}},
            "status": {"phase": phase, "conditions": [condition]},
        }
    )


def test_volcanos_word_on_its_pod_group_is_reported_until_the_group_runs() -> None:
    spec = gang_spec("volcano")
    waiting = [pod(spec, "worker-0", "Pending"), pod(spec, "worker-1", "Pending")]
    pending = decide_observing(
        job_view(spec), waiting, [], NOW, pod_groups=[volcano_group("Pending")]
    )
    assert pending.status is not None
    running = next(c for c in pending.status["conditions"] if c["type"] == "Running")
    assert running["reason"] == "GangUnschedulable"
    assert running["message"].endswith("together)): 2/2 tasks in gang unschedulable")
    assert volcano_group("Running").unschedulable is None


def test_the_gate_makes_the_pod_group_first_and_lets_the_pods_start_once_it_is_seen() -> None:
    plain_spec = {"tfReplicaSpecs": {"Worker": replica_spec(2)}}
    plain = parse_spec("mnist", plain_spec)
    unganged = gang_observation(plain, [], USUAL_GANG_SCHEDULERS)
    assert (
        GangScheduling().gate(job_view(plain_spec), plain, unganged, pods_exist=False, now="")
        is None
    ), "not gang-scheduled: no gate"
    gang = job_gang(parse_spec("mnist", gang_spec(workers=2)), USUAL_GANG_SCHEDULERS)
    assert gang is not None
    first = gate(JOB, gang, [])
    assert not first.open
    assert first.writes.create is not None
    assert first.writes.create["spec"] == {"minMember": 2}
    # An earlier job's PodGroup of the name is going away: nothing is made until it has.
    earlier = gate(JOB, gang, [observed_group("uid-0", minMember=4)])
    assert (earlier.open, earlier.writes.create) == (False, None)
    # Its own, from before the replicas changed: patched, and the pods wait for the change.
    stale = gate(JOB, gang, [observed_group(minMember=3)])
    assert not stale.open
    assert stale.writes.patch is not None
    assert stale.writes.patch[1] == {"spec": {"minMember": 2}}
    opened = gate(JOB, gang, [observed_group(minMember=2)])
    assert (opened.open, opened.writes) == (True, PodGroupWrites())
    pod: dict[str, Any] = {"metadata": {"name": "mnist-worker-0"}, "spec": {}}
    opened.dress(pod, Replica(ReplicaType.WORKER, 0))
    assert pod["spec"]["schedulerName"] == SCHEDULER_PLUGINS_NAME, "it names the gang's scheduler"
    assert pod["metadata"]["labels"] == {"scheduling.x-k8s.io/pod-group": "mnist"}


def test_a_gang_larger_than_its_job_never_lets_a_pod_start_and_says_why() -> None:
    spec = gang_spec("volcano", workers=2, minAvailable=3)
    gang = job_gang(parse_spec("mnist", spec), USUAL_GANG_SCHEDULERS)
    assert gang is not None
    assert gang.larger_than_job
    seen = observed_group(api_version=VOLCANO.api_version, **render_pod_group(JOB, gang)["spec"])
    closed = gate(JOB, gang, [seen])
    assert not closed.open
    assert (
        closed.why
        == why_waiting(JOB, gang, [seen])
        == (
            "spec.runPolicy.schedulingPolicy.minAvailable is 3, more than the job's 2 replicas: "
            "the gang cannot be complete until minAvailable is lowered"
        )
    )


def test_the_pod_groups_say_why_a_gang_waits() -> None:
    gang = job_gang(parse_spec("mnist", gang_spec("volcano")), USUAL_GANG_SCHEDULERS)
    said = PodGroupObservation("mnist", "pg-1", JOB.uid, VOLCANO.api_version, {}, "1/2 fit")
    assert why_waiting(JOB, gang, [said]) == "1/2 fit"
    assert why_waiting(JOB, gang, [observed_group(api_version=VOLCANO.api_version)]) is None
    assert why_waiting(JOB, None, [said]) is None


def test_pod_groups_are_released_when_finished_suspended_or_of_another_scheduler() -> None:
    plugins, volcano = observed_group(), observed_group(api_version=VOLCANO.api_version)
    others = observed_group("uid-0")
    groups = [plugins, volcano, others]
    gang = job_gang(parse_spec("mnist", gang_spec()), USUAL_GANG_SCHEDULERS)
    assert released(JOB, gang, groups, finished=False, suspended=False) == [
        (volcano, "the TFJob is not gang-scheduled by it any more")
    ]
    assert released(JOB, gang, groups, finished=True, suspended=False) == [
        (plugins, "the TFJob has finished"),
        (volcano, "the TFJob has finished"),
    ]
    assert [why for _, why in released(JOB, gang, groups, finished=False, suspended=True)] == [
        "the TFJob is suspended"
    ] * 2
    assert released(JOB, None, [plugins], finished=False, suspended=False) == [
        (plugins, "the TFJob is not gang-scheduled by it any more")
    ]
