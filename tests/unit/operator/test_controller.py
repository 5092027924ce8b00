"""The controller around `decide`: writes, their order, expectations, retries and delays.

Driven with a fake API (`FakeWrites`, which records every call and keeps the objects it
created) and a clock the test moves; the watch caches are the real `Store`s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from support.builders import JOB, NOW, replica_spec

from tfjob_operator.api import JobRef
from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.controller import (
    CONFLICT_RETRY_SECONDS,
    EXPECTATION_TTL_SECONDS,
    GONE,
    PROGRESS_WRITE_DELAY_SECONDS,
    Caches,
    Controller,
)
from tfjob_operator.integrations import Settings, integrations
from tfjob_operator.integrations.kueue import MISSING_CLASS_RETRY_SECONDS, workload_name
from tfjob_operator.integrations.tensorboard import observe_board
from tfjob_operator.job_view import JobView
from tfjob_operator.metrics import Metrics
from tfjob_operator.observe import (
    FlavorObservation,
    PodGroupObservation,
    PriorityClass,
    WorkloadObservation,
    observe_pod,
    observe_service,
    observe_workload,
)
from tfjob_operator.timeutil import to_rfc3339
from tfjob_operator.watchcache import Store

KEY = (JOB.namespace, JOB.name)
SPEC: dict[str, Any] = {
    "runPolicy": {"cleanPodPolicy": "Running"},
    "tfReplicaSpecs": {"Chief": replica_spec(1, "ExitCode"), "Worker": replica_spec(2, "ExitCode")},
}
CHILDREN = ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"]


class FakeClock:
    def __init__(self) -> None:
        self.seconds = 1000.0

    def now(self) -> datetime:
        return NOW + timedelta(seconds=self.seconds - 1000.0)

    def monotonic(self) -> float:
        return self.seconds


class FakeWrites:
    """Answers as the API server would, and records each call as (verb, name...)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.bodies: dict[str, Mapping[str, Any]] = {}
        self.version = 1
        self.conflict = False
        self.refuse_create: ApiError | None = None
        #: The kinds refuse_create refuses; None: all.
        self.refused_kinds: set[str] | None = None
        self.refuse_delete: ApiError | None = None
        self.events: list[Mapping[str, Any]] = []
        #: Whether each status write was sent as a decision (ahead of other jobs' writes).
        self.decisions: list[bool] = []
        self.patched: list[tuple[JobRef, dict[str, Any]]] = []
        #: Kueue's ResourceFlavors, by name.
        self.flavors: dict[str, FlavorObservation] = {}
        #: The values of WorkloadPriorityClasses and PriorityClasses, by (kind, name), and
        #: the cluster's PriorityClasses as a list answers them.
        self.priority_classes: dict[tuple[str, str], int] = {}
        self.listed_classes: list[PriorityClass] = []

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return self._create("pod", body)

    async def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return self._create("service", body)

    def _create(self, kind: str, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        self.calls.append((f"create {kind}", name))
        if self.refuse_create is not None and kind in (self.refused_kinds or {kind}):
            raise self.refuse_create
        self.bodies[f"{kind}/{name}"] = body
        return True

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("delete pod", name))
        if self.refuse_delete is not None:
            raise self.refuse_delete
        return True

    async def delete_service(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("delete service", name))
        return True

    async def create_object(
        self, namespace: str, group_path: str, plural: str, body: Mapping[str, Any]
    ) -> bool:
        return self._create(body["kind"].lower(), body)

    async def delete_object(
        self, namespace: str, group_path: str, plural: str, name: str, uid: str
    ) -> bool:
        self.calls.append((f"delete {plural}", name))
        return True

    async def delete_collection(
        self, namespace: str, plural: str, job_uid: str, keep: Collection[str]
    ) -> list[tuple[str, str]]:
        self.calls.append((f"deletecollection {plural}", *sorted(keep)))
        kind = plural[:-1]
        return [
            (body["metadata"]["name"], f"uid-{name}")
            for name, body in self.bodies.items()
            if name.startswith(f"{kind}/") and body["metadata"]["name"] not in keep
        ]

    async def delete_job(self, job: JobRef) -> bool:
        self.calls.append(("delete tfjob", job.name))
        return True

    async def create_pod_group(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return self._create("podgroup", body)

    async def patch_pod_group(
        self, namespace: str, group: PodGroupObservation, patch: Mapping[str, Any]
    ) -> None:
        self.calls.append(("patch podgroup", group.name, json.dumps(patch, sort_keys=True)))

    async def delete_pod_group(self, namespace: str, group: PodGroupObservation) -> bool:
        self.calls.append(("delete podgroup", group.name, group.api_version))
        return True

    async def patch_status(
        self,
        job: JobRef,
        resource_version: str,
        patch: Mapping[str, Any],
        *,
        decision: bool,
    ) -> str | None:
        self.calls.append(("patch status", resource_version))
        self.patched.append((job, dict(patch)))
        self.decisions.append(decision)
        if self.conflict:
            return None
        self.version += 1
        return str(self.version)

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> str:
        name = f"event-{len(self.events)}"
        self.events.append({**body, "metadata": {**body["metadata"], "name": name}})
        return name

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Updates the recorded Event as a merge patch would."""
        for index, event in enumerate(self.events):
            if event["metadata"]["name"] == name:
                self.events[index] = {**event, **patch}
                return True
        return False

    async def create_workload(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return self._create("workload", body)

    async def delete_workload(self, namespace: str, workload: WorkloadObservation) -> bool:
        self.calls.append(("delete workload", workload.name))
        return True

    async def patch_workload(
        self,
        namespace: str,
        workload: WorkloadObservation,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> None:
        self.calls.append(("patch workload status" if status else "patch workload", workload.name))

    async def read_resource_flavor(self, name: str) -> FlavorObservation | None:
        self.calls.append(("read flavor", name))
        return self.flavors.get(name)

    async def read_priority_class(self, kind: str, name: str) -> int | None:
        self.calls.append(("read priority class", kind, name))
        return self.priority_classes.get((kind, name))

    async def list_priority_classes(self) -> list[PriorityClass]:
        self.calls.append(("list priority classes",))
        return list(self.listed_classes)


class Harness:
    def __init__(self, tensorboard_image: str | None = None) -> None:
        """The controller with every integration, as the operator runs it."""
        self.writes = FakeWrites()
        self.clock = FakeClock()
        enabled = integrations(Settings(tensorboard_image=tensorboard_image))
        self.caches = Caches(
            jobs=Store(),
            pods=Store(),
            services=Store(),
            integrations={integration.name: Store() for integration in enabled},
        )
        self.controller = Controller(
            self.writes,
            self.caches,
            Metrics(),
            None,
            clock=self.clock,
            instance="test",
            integrations=enabled,
        )
        self.status: dict[str, Any] = {}
        self.job(version="1")

    def job(
        self, version: str, spec: Mapping[str, Any] = SPEC, labels: Mapping[str, str] | None = None
    ) -> None:
        body = {
            "metadata": {
                "namespace": JOB.namespace,
                "name": JOB.name,
                "uid": JOB.uid,
                "resourceVersion": version,
                "generation": 1,
                "labels": dict(labels or {}),
            },
            "spec": spec,
            "status": self.status,
        }
        self.caches.jobs.put(JOB.uid, KEY, JobView.from_body(body))

    def show_children(self, phase: str = "Running", exited: str | None = None) -> None:
        """The watch cache catches up with every child the fake API holds."""
        for name, body in self.writes.bodies.items():
            shown = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
            if name.startswith("pod/"):
                shown["status"] = {"phase": phase}
                if body["metadata"]["name"] == exited:
                    shown["status"] = {
                        "phase": "Succeeded",
                        "containerStatuses": [
                            {"name": "tensorflow", "state": {"terminated": {"exitCode": 0}}}
                        ],
                    }
                self.caches.pods.put(f"uid-{name}", KEY, observe_pod(shown))
            else:
                self.caches.services.put(f"uid-{name}", KEY, observe_service(shown))

    def reconcile(self) -> Any:
        async def once() -> Any:
            outcome = await self.controller.reconcile(KEY)
            await self.controller.stop()  # lets the events posted in the background finish
            return outcome

        return asyncio.run(once())

    def reconcile_raising(self) -> None:
        """One reconcile whose error reaches the test once the events are posted."""

        async def once() -> None:
            try:
                await self.controller.reconcile(KEY)
            finally:
                await self.controller.stop()

        asyncio.run(once())

    def calls(self, verb: str) -> list[tuple[str, ...]]:
        return [c for c in self.writes.calls if c[0] == verb]

    def catch_up(self) -> None:
        """The watch cache shows the TFJob as the status writes so far left it."""
        for _, patch in self.writes.patched[self._applied :]:
            self.status = _merged(self.status, patch)
        self._applied = len(self.writes.patched)
        self.job(version=str(self.writes.version))

    _applied = 0


def _merged(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def test_a_new_job_gets_its_children_and_its_progress_a_moment_later() -> None:
    harness = Harness()
    requeue = harness.reconcile()
    assert sorted(n for _, n in harness.calls("create pod")) == CHILDREN
    assert sorted(n for _, n in harness.calls("create service")) == CHILDREN
    # Created and the pod counts are progress: held back, and looked at again in time.
    assert harness.calls("patch status") == []
    assert requeue == pytest.approx(PROGRESS_WRITE_DELAY_SECONDS)
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    assert harness.calls("patch status") == [("patch status", "1")]
    assert harness.writes.decisions == [False]  # progress: behind other jobs' children
    reasons = [e["reason"] for e in harness.writes.events]
    assert sorted(reasons) == ["SuccessfulCreatePod", "SuccessfulCreateService"]
    event = harness.writes.events[0]
    assert event["involvedObject"]["uid"] == JOB.uid
    assert event["reportingInstance"] == "test"


def test_children_in_flight_are_not_created_twice_until_the_expectation_lapses() -> None:
    harness = Harness()
    harness.reconcile()
    harness.writes.calls.clear()
    harness.reconcile()  # the cache has not shown the children yet
    assert harness.calls("create pod") == []
    assert harness.calls("create service") == []
    harness.clock.seconds += EXPECTATION_TTL_SECONDS + 1
    harness.reconcile()  # never shown: the creates are tried again (the server would say 409)
    assert sorted(n for _, n in harness.calls("create pod")) == CHILDREN


def test_a_shown_child_ends_its_expectation() -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children()
    harness.writes.calls.clear()
    harness.reconcile()
    assert harness.calls("create pod") == []
    expected = harness.controller._expected[KEY]
    assert expected.pods.created == {}
    assert expected.services.created == {}


def test_success_is_written_before_the_clean_up_which_goes_in_one_request_per_kind() -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children(exited="mnist-chief-0")
    harness.writes.calls.clear()
    harness.reconcile()
    verbs = [c[0] for c in harness.writes.calls]
    assert verbs[0] == "patch status"
    assert harness.writes.decisions[-1] is True  # ahead of every other job's writes
    # The chief's own pod is not running any more and is kept; so is its service.
    assert harness.calls("deletecollection pods") == [("deletecollection pods", "mnist-chief-0")]
    assert harness.calls("deletecollection services") == [
        ("deletecollection services", "mnist-chief-0")
    ]
    assert harness.calls("delete pod") == []
    messages = {e["reason"]: e["message"] for e in harness.writes.events}
    assert messages["SuccessfulDeletePod"] == (
        "Deleted pods mnist-worker-0, mnist-worker-1: cleanPodPolicy Running"
    )
    assert "TFJobSucceeded" in messages


def test_a_refused_collection_delete_falls_back_to_one_delete_per_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children(exited="mnist-chief-0")
    harness.writes.calls.clear()

    async def refuse(*_: Any) -> list[tuple[str, str]]:
        raise ApiError(403, "deletecollection", b'{"message": "forbidden"}')

    monkeypatch.setattr(harness.writes, "delete_collection", refuse)
    harness.reconcile()
    assert sorted(n for _, n in harness.calls("delete pod")) == CHILDREN[1:]
    assert sorted(n for _, n in harness.calls("delete service")) == CHILDREN[1:]


def test_a_status_conflict_touches_no_child_and_decides_again_soon() -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children(exited="mnist-chief-0")
    harness.writes.calls.clear()
    harness.writes.conflict = True
    assert harness.reconcile() == CONFLICT_RETRY_SECONDS
    assert [c[0] for c in harness.writes.calls] == ["patch status"]


def test_a_reconcile_waits_for_the_cache_to_show_its_own_status_write() -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children(exited="mnist-chief-0")
    harness.reconcile()  # writes Succeeded over version 1
    harness.writes.calls.clear()
    assert harness.reconcile() == CONFLICT_RETRY_SECONDS  # the cache still shows version 1
    assert harness.writes.calls == []


def refused(status: int, reason: str, message: str) -> ApiError:
    body = json.dumps({"kind": "Status", "reason": reason, "message": message}).encode()
    return ApiError(status, "create pod", body)


def running_condition(harness: Harness) -> Mapping[str, Any]:
    _, status = harness.writes.patched[-1]
    return next(c for c in status["conditions"] if c["type"] == "Running")


def test_a_refused_child_is_remembered_reported_and_retried_with_backoff_not_raised() -> None:
    harness = Harness()
    harness.writes.refused_kinds = {"pod"}
    harness.writes.refuse_create = refused(
        403, "Forbidden", 'pods "mnist-chief-0" is forbidden: error looking up service account'
    )
    retry = harness.reconcile()  # no error: the job's problem, not the operator's
    assert retry == pytest.approx(2.0)
    harness.catch_up()

    def warnings() -> list[Mapping[str, Any]]:
        return [e for e in harness.writes.events if e["type"] == "Warning"]

    assert {e["reason"] for e in warnings()} == {"FailedCreatePod"}
    # The creates' slow start stopped at the first replica's refused pod: one request.
    assert harness.calls("create pod") == [("create pod", "mnist-chief-0")]
    assert len(warnings()) == 1

    harness.writes.calls.clear()
    harness.reconcile()  # woken before the retry is due: nothing is created at all
    assert harness.calls("create pod") == harness.calls("create service") == []

    harness.catch_up()
    harness.clock.seconds += 3  # the first retry: 2 s and up to half of it in jitter
    harness.reconcile()
    assert harness.calls("create pod") == [("create pod", "mnist-chief-0")]
    assert len(warnings()) == 1  # the repeat counted up the same Event
    assert {e["count"] for e in warnings()} == {2}
    assert harness.writes.patched, "the refusal reached the status"
    condition = running_condition(harness)
    assert condition["status"] == "False"
    assert condition["reason"] == "FailedCreatePod"
    assert condition["message"].startswith(
        "chief-0: the API server refused its pod (403 Forbidden): "
        'pods "mnist-chief-0" is forbidden: error looking up service account'
    )


def test_a_forbidden_child_keeps_the_job_waiting_and_its_acceptance_clears_the_reason() -> None:
    harness = Harness()
    harness.writes.refused_kinds = {"pod"}
    harness.writes.refuse_create = refused(403, "Forbidden", "exceeded quota: compute")
    harness.reconcile()
    for _ in range(6):
        harness.catch_up()
        harness.clock.seconds += 60
        harness.reconcile()
    assert running_condition(harness)["reason"] == "FailedCreatePod"
    assert not any(
        c["type"] == "Failed" for _, status in harness.writes.patched for c in status["conditions"]
    )

    harness.writes.refuse_create = None
    harness.writes.calls.clear()
    harness.catch_up()
    harness.clock.seconds += 60
    harness.reconcile()
    assert len(harness.calls("create pod")) == 3
    assert not harness.controller._refusals[KEY]  # every child created: no retry pending
    harness.show_children(phase="Pending")
    harness.catch_up()
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    condition = running_condition(harness)
    assert (condition["status"], condition["reason"]) == ("False", "ReplicasStarting")


def test_a_child_refused_as_invalid_fails_the_job_after_the_grace_period() -> None:
    harness = Harness()
    harness.writes.refused_kinds = {"pod"}
    harness.writes.refuse_create = refused(
        422, "Invalid", 'Pod "mnist-chief-0" is invalid: spec.containers[0].volumeMounts[0].name'
    )
    harness.reconcile()
    harness.catch_up()
    harness.clock.seconds += 2
    harness.reconcile()
    condition = running_condition(harness)
    assert condition["reason"] == "FailedCreatePod"
    assert "the TFJob fails at " in condition["message"]

    harness.catch_up()
    harness.clock.seconds += 28  # the grace, 30 s from the first refusal
    harness.reconcile()
    _, status = harness.writes.patched[-1]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "FailedCreatePod")
    assert "it was still refused after 30s" in failed["message"]
    harness.catch_up()
    harness.writes.calls.clear()
    assert harness.reconcile() is None  # a failed job creates nothing and retries nothing
    assert harness.calls("create pod") == []


def test_a_server_error_still_raises_and_a_terminating_namespace_is_quiet() -> None:
    harness = Harness()
    harness.writes.refuse_create = ApiError(500, "create pod", b'{"message": "etcd timeout"}')
    with pytest.raises(ApiError):
        harness.reconcile_raising()
    assert "FailedCreateService" in {e["reason"] for e in harness.writes.events}

    quiet = Harness()
    quiet.writes.refuse_create = ApiError(
        403,
        "create pod",
        b'{"message": "forbidden", "details": {"causes": [{"reason": "NamespaceTerminating"}]}}',
    )
    quiet.reconcile()
    assert not {e["reason"] for e in quiet.writes.events} & {"FailedCreatePod"}


def test_a_job_gone_from_the_cache_ends_its_worker_state() -> None:
    harness = Harness()
    harness.reconcile()
    harness.caches.jobs.remove(JOB.uid)
    assert harness.reconcile() is GONE
    assert KEY not in harness.controller._expected


def test_a_reconcile_records_how_long_the_oldest_change_it_sees_waited_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = Harness()

    async def woken_twice_then_reconciled() -> None:
        reconciled = asyncio.Event()
        create_pod = harness.writes.create_pod

        async def create_pod_noted(namespace: str, body: Mapping[str, Any]) -> bool:
            reconciled.set()
            return await create_pod(namespace, body)

        monkeypatch.setattr(harness.writes, "create_pod", create_pod_noted)
        harness.controller.notify(KEY)  # the worker notes when the first change came...
        harness.clock.seconds += 0.25
        harness.controller.notify(KEY)  # ...and a second one before it runs adds no wait
        await asyncio.wait_for(reconciled.wait(), 10)
        await harness.controller.stop()

    asyncio.run(woken_twice_then_reconciled())
    registry = harness.controller.metrics.registry
    assert registry.get_sample_value("tfjob_operator_queue_wait_seconds_count") == 1
    waited = registry.get_sample_value("tfjob_operator_queue_wait_seconds_sum")
    assert waited == pytest.approx(0.25)


def test_a_delete_that_failed_is_tried_again_by_the_next_reconcile() -> None:
    harness = Harness()
    harness.reconcile()
    harness.show_children()
    one_worker = {
        **SPEC,
        "tfReplicaSpecs": {**SPEC["tfReplicaSpecs"], "Worker": replica_spec(1, "ExitCode")},
    }
    harness.job(version="2", spec=one_worker)
    harness.writes.refuse_delete = ApiError(500, "delete pod", b'{"message": "etcd timeout"}')
    with pytest.raises(ApiError):
        harness.reconcile()
    harness.writes.refuse_delete = None
    harness.writes.calls.clear()
    harness.reconcile()
    assert ("delete pod", "mnist-worker-1") in harness.writes.calls


def admitted_workload(flavor: str) -> WorkloadObservation:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}
    return observe_workload(
        {
            "metadata": {
                "name": workload_name(JOB),
                "uid": "wl-uid",
                "labels": {"tfjob.dev/controller-uid": JOB.uid},
                "ownerReferences": [{"kind": "TFJob", "uid": JOB.uid, "controller": True}],
            },
            "spec": {"podSets": [{"name": "chief", "count": 1}, {"name": "worker", "count": 2}]},
            "status": {
                "conditions": [admitted],
                "admission": {
                    "clusterQueue": "cq",
                    "podSetAssignments": [
                        {"name": "chief", "flavors": {"cpu": flavor}},
                        {"name": "worker", "flavors": {"cpu": flavor}},
                    ],
                },
            },
        }
    )


def test_a_queued_job_makes_its_workload_first_and_its_pods_once_admitted() -> None:
    harness = Harness()
    harness.job(version="1", labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.reconcile()
    assert harness.calls("create workload") == [("create workload", workload_name(JOB))]
    assert harness.calls("create pod") == []
    created = next(e for e in harness.writes.events if e["reason"] == "SuccessfulCreateWorkload")
    assert created["message"] == (
        f"Created Workload {workload_name(JOB)} (kueue.x-k8s.io/v1beta2) in LocalQueue team: "
        "the job runs once Kueue admits it"
    )

    harness.writes.flavors["a100"] = FlavorObservation({"pool": "a100"}, ())
    harness.caches.integrations["kueue"].put("wl-uid", KEY, admitted_workload("a100"))
    # The cache shows the status written (Suspended while queued).
    harness.status = harness.writes.patched[-1][1]
    harness.job(version="2", labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.reconcile()
    assert sorted(n for _, n in harness.calls("create pod")) == CHILDREN
    pods = [b for k, b in harness.writes.bodies.items() if k.startswith("pod/")]
    assert all(p["spec"]["nodeSelector"] == {"pool": "a100"} for p in pods)
    assert all(
        p["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == workload_name(JOB) for p in pods
    )
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for p in pods} == {"chief", "worker"}
    assert not any("schedulingGates" in p["spec"] for p in pods), "no topology assignment"
    harness.reconcile()
    assert harness.calls("read flavor") == [("read flavor", "a100")], "read once in its TTL"


def test_a_workload_takes_the_priority_its_class_gives_and_waits_for_a_missing_class() -> None:
    labels = {"kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/priority-class": "high"}
    harness = Harness()
    harness.job(version="1", labels=labels)
    outcome = harness.reconcile()
    assert harness.calls("create workload") == []
    (missing,) = [e for e in harness.writes.events if e["reason"] == "FailedCreateWorkload"]
    assert missing["type"] == "Warning"
    assert missing["message"].startswith("WorkloadPriorityClass high does not exist")
    assert outcome == MISSING_CLASS_RETRY_SECONDS

    harness.writes.priority_classes[("WorkloadPriorityClass", "high")] = 1000
    harness.catch_up()
    harness.job(str(harness.writes.version), labels=labels)
    harness.reconcile()
    spec = harness.writes.bodies[f"workload/{workload_name(JOB)}"]["spec"]
    assert spec["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    assert spec["priority"] == 1000


def test_a_workload_without_a_class_takes_the_clusters_lowest_default_priority() -> None:
    harness = Harness()
    harness.writes.listed_classes = [
        PriorityClass("high", 1000, global_default=False),
        PriorityClass("normal", 7, global_default=True),
        PriorityClass("raised", 9, global_default=True),
    ]
    default = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "normal"}
    harness.job(version="1", labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.reconcile()
    spec = harness.writes.bodies[f"workload/{workload_name(JOB)}"]["spec"]
    assert (spec["priorityClassRef"], spec["priority"]) == (default, 7)


def test_a_workload_created_tells_its_watch_the_api_is_served() -> None:
    """Kueue installed after the operator started: its Workload watch found no API and
    looks again only now and then, so the create that succeeds says so at once."""
    harness = Harness()
    served: list[str] = []
    harness.controller.served = served.append
    harness.job(version="1", labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.writes.refuse_create = ApiError(404, "create workload ml/x", b"404 page not found")
    with pytest.raises(ApiError):
        harness.reconcile_raising()
    assert served == [], "a refused create says nothing is served"

    harness.writes.refuse_create = None
    harness.catch_up()
    harness.job(str(harness.writes.version), labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.reconcile()
    assert len(harness.calls("create workload")) == 2
    assert served == ["kueue.x-k8s.io/v1beta2"]


def test_a_workload_api_not_served_is_an_event_that_names_kueue() -> None:
    harness = Harness()
    harness.job(version="1", labels={"kueue.x-k8s.io/queue-name": "team"})
    harness.writes.refuse_create = ApiError(404, "create workload ml/x", b"404 page not found")
    with pytest.raises(ApiError):  # the worker retries it with a backoff
        harness.reconcile_raising()
    (failed,) = [e for e in harness.writes.events if e["reason"] == "FailedCreateWorkload"]
    assert failed["type"] == "Warning"
    assert failed["message"].startswith("kueue.x-k8s.io/v1beta2 is not served: is Kueue installed?")
    assert harness.calls("create pod") == []


# -- the job's TensorBoard (integrations/tensorboard.py) ------------------------------------


def test_a_tensorboard_is_created_once_its_status_written_once_and_removed_after_its_ttl() -> None:
    harness = Harness(tensorboard_image="trainer:1")
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "training"}}
    worker = replica_spec(2, volumeMounts=[{"name": "data", "mountPath": "/data"}])
    worker["template"]["spec"]["volumes"] = [volume]
    spec = {
        "tfReplicaSpecs": {"Worker": worker},
        "tensorboard": {"logDir": "/data/logs", "ttlSecondsAfterFinished": 60},
    }
    harness.job("1", spec)
    harness.reconcile()  # the job starts, and its TensorBoard with it
    assert harness.calls("create deployment") == [("create deployment", "mnist-tensorboard")]
    assert ("create service", "mnist-tensorboard") in harness.writes.calls
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()  # the progress, with the TensorBoard's address, is written
    assert harness.calls("create deployment") == [("create deployment", "mnist-tensorboard")]
    assert harness.writes.patched[-1][1]["tensorboard"]["url"] == (
        "http://mnist-tensorboard.ml.svc:6006/"
    )
    assert "TensorBoardCreated" in [e["reason"] for e in harness.writes.events]
    harness.catch_up()
    harness.job(str(harness.writes.version), spec)
    for kind in ("Deployment", "Service"):
        body = harness.writes.bodies[f"{kind.lower()}/mnist-tensorboard"]
        shown = {**body, "metadata": {**body["metadata"], "uid": f"uid-{kind}"}}
        board = observe_board(kind, {**shown, "status": {"availableReplicas": 1}})
        harness.caches.integrations["tensorboard"].put(f"uid-{kind}", KEY, board)
    harness.writes.calls.clear()
    harness.reconcile()  # ready is progress: written a moment later, in one small patch
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    assert harness.writes.patched[-1][1] == {"tensorboard": {"ready": True}}
    assert harness.calls("create deployment") == []
    harness.catch_up()
    harness.job(str(harness.writes.version), spec)
    harness.writes.calls.clear()
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    assert harness.calls("patch status") == []
    assert harness.calls("create deployment") == []
    # The job finished a minute ago: its TensorBoard goes, and the status says so.
    finished = _merged(
        harness.status,
        {
            "completionTime": to_rfc3339(harness.clock.now() - timedelta(seconds=60)),
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded"}],
        },
    )
    harness.status = finished
    harness.job(str(harness.writes.version), spec)
    harness.reconcile()
    assert harness.calls("delete deployments") == [("delete deployments", "mnist-tensorboard")]
    assert harness.calls("delete services") == [("delete services", "mnist-tensorboard")]
    assert "TensorBoardRemoved" in [e["reason"] for e in harness.writes.events]
    harness.clock.seconds += PROGRESS_WRITE_DELAY_SECONDS
    harness.reconcile()
    assert harness.writes.patched[-1][1]["tensorboard"] is None


def test_a_class_the_operator_may_not_read_counts_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespaced install cannot read cluster-scoped classes: the Workload is still made."""
    labels = {"kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/priority-class": "high"}
    harness = Harness()

    async def forbidden(kind: str, name: str) -> int | None:
        raise ApiError(403, f"get {kind} {name}", b'{"reason": "Forbidden"}')

    monkeypatch.setattr(harness.writes, "read_priority_class", forbidden)
    harness.job(version="1", labels=labels)
    harness.reconcile()
    spec = harness.writes.bodies[f"workload/{workload_name(JOB)}"]["spec"]
    assert (spec["priorityClassRef"]["name"], spec["priority"]) == ("high", 0)
