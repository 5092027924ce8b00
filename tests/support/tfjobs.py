"""Creating TFJobs and waiting on them through the real API server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubernetes import client, watch

from support.builders import GROUP, PLURAL, VERSION
from support.examples import claims
from support.waiting import wait_until

T = TypeVar("T")


class TFJobs:
    """TFJob operations in one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str, group: str = GROUP) -> None:
        self.namespace = namespace
        self.group = group
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Creates the TFJob, after the examples' claims it mounts (`create_claims`)."""
        self.create_claims(body)
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            self.group, VERSION, self.namespace, PLURAL, dict(body)
        )
        return created

    def create_claims(self, job: Mapping[str, Any]) -> None:
        """The examples' claims `job` mounts that do not exist yet, as `kubectl apply -f` of
        an example's file makes its claim with the job."""
        declared = claims()
        for name in claims_of(job):
            if name in declared and not self._claim_exists(name):
                self.core.create_namespaced_persistent_volume_claim(self.namespace, declared[name])

    def _claim_exists(self, name: str) -> bool:
        try:
            self.core.read_namespaced_persistent_volume_claim(name, self.namespace)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def get(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            self.group, VERSION, self.namespace, PLURAL, name
        )
        return found

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def patch_spec(self, name: str, spec: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            self.group, VERSION, self.namespace, PLURAL, name, {"spec": dict(spec)}
        )

    def delete(self, name: str, propagation: str = "Background") -> None:
        self.custom.delete_namespaced_custom_object(
            self.group, VERSION, self.namespace, PLURAL, name, propagation_policy=propagation
        )

    def pods(self, name: str) -> list[client.V1Pod]:
        items: list[client.V1Pod] = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"tfjob.dev/job-name={name}"
        ).items
        return sorted(items, key=lambda p: p.metadata.name)

    def services(self, name: str) -> list[client.V1Service]:
        items: list[client.V1Service] = self.core.list_namespaced_service(
            self.namespace, label_selector=f"tfjob.dev/job-name={name}"
        ).items
        return sorted(items, key=lambda s: s.metadata.name)

    def events(self, name: str) -> list[client.CoreV1Event]:
        items: list[client.CoreV1Event] = self.core.list_namespaced_event(
            self.namespace,
            field_selector=f"involvedObject.kind=TFJob,involvedObject.name={name}",
        ).items
        return items

    def wait_events(
        self, name: str, reasons: Sequence[str], timeout: float = 30
    ) -> list[client.CoreV1Event]:
        """The job's events once every one of `reasons` is among them: the operator posts
        events in the background, after the writes they report."""
        return self.poll(
            name,
            lambda: self.events(name),
            lambda events: set(reasons) <= {e.reason for e in events},
            f"events {', '.join(reasons)}",
            timeout,
        )

    def wait_for(
        self,
        name: str,
        predicate: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = 120,
    ) -> dict[str, Any]:
        """Polls the TFJob until `predicate(job)`; on timeout fails with what was seen."""
        return self.poll(name, lambda: self.get(name), predicate, what, timeout)

    def wait_state(self, name: str, state: str, timeout: float = 120) -> dict[str, Any]:
        return self.wait_for(
            name,
            lambda job: (job.get("status") or {}).get("state") == state,
            f"state {state}",
            timeout,
        )

    def wait_gone(self, name: str, timeout: float = 60) -> None:
        self.poll(
            name,
            lambda: (self.exists(name), self.pods(name), self.services(name)),
            lambda seen: not any(seen),
            "the TFJob, its pods and its services to be gone",
            timeout,
        )

    def wait_pods(
        self,
        name: str,
        predicate: Callable[[list[client.V1Pod]], bool],
        what: str,
        timeout: float = 60,
    ) -> list[client.V1Pod]:
        return self.poll(name, lambda: self.pods(name), predicate, f"pods: {what}", timeout)

    def poll(
        self,
        name: str,
        fetch: Callable[[], T],
        predicate: Callable[[T], bool],
        what: str,
        timeout: float,
    ) -> T:
        """Polls `fetch()` until `predicate` holds; on timeout fails describing TFJob `name`."""
        return wait_until(
            fetch,
            timeout,
            lambda _: f"TFJob {name}: {what}\n{self.describe(name)}",
            until=predicate,
        )

    def describe(self, name: str) -> str:
        """The job's status, events and pods: what a failing test needs to show."""
        try:
            job = self.get(name)
        except client.ApiException as error:
            job = {"error": str(error)}
        lines = ["status: " + json.dumps(job.get("status"), indent=1, sort_keys=True)]
        lines += [f"event {e.type} {e.reason}: {e.message}" for e in self.events(name)]
        for pod in self.pods(name):
            statuses = [
                (c.name, c.state.to_dict() if c.state else None, c.restart_count)
                for c in pod.status.container_statuses or []
            ]
            lines.append(
                f"pod {pod.metadata.name} uid={pod.metadata.uid} phase={pod.status.phase} "
                f"deleting={pod.metadata.deletion_timestamp is not None} "
                f"labels={pod.metadata.labels} containers={statuses}"
            )
        return "\n".join(lines)


def claims_of(job: Mapping[str, Any]) -> list[str]:
    """The PersistentVolumeClaims the job's pod templates mount."""
    return sorted(
        {
            volume["persistentVolumeClaim"]["claimName"]
            for spec in (job.get("spec") or {}).get("tfReplicaSpecs", {}).values()
            for volume in spec["template"]["spec"].get("volumes") or []
            if "persistentVolumeClaim" in volume
        }
    )


def find_condition(job: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The object's (a TFJob's, pod's or node's) condition of this type, if it has one."""
    for entry in (job.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


def condition(job: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The object's condition of this type; the test fails, naming those it has, without one."""
    found = find_condition(job, kind)
    conditions = (job.get("status") or {}).get("conditions") or []
    assert found is not None, f"no {kind} condition; it has {[c.get('type') for c in conditions]}"
    return found


@dataclass
class PodCreations:
    """Every pod ADDED event of a job, recorded by a watch running beside the test.

    Proves that the operator never has two pods of one replica and generation, even across
    operator restarts.
    """

    api_client: client.ApiClient
    namespace: str
    job_name: str
    added: list[tuple[str, str, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PodCreations:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _watch(self) -> None:
        core = client.CoreV1Api(self.api_client)
        selector = f"tfjob.dev/job-name={self.job_name}"
        seen: set[str] = set()

        def record(pod: client.V1Pod) -> None:
            if pod.metadata.uid in seen:
                return
            seen.add(pod.metadata.uid)
            generation = (pod.metadata.labels or {}).get("tfjob.dev/replica-generation", "?")
            self.added.append((pod.metadata.name, generation, pod.metadata.uid))

        version = None
        while not self._stop.is_set():
            if version is None:
                listing = core.list_namespaced_pod(self.namespace, label_selector=selector)
                for pod in listing.items:
                    record(pod)
                version = listing.metadata.resource_version
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=2,
                ):
                    record(event["object"])
                version = stream.resource_version
            except client.ApiException as error:
                if error.status != 410:
                    raise
                version = None  # the watch window expired: list again

    def duplicates(self) -> list[tuple[str, str]]:
        keys = [(name, generation) for name, generation, _ in self.added]
        return sorted({k for k in keys if keys.count(k) > 1})
