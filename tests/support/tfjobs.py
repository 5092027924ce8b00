"""Creating TFJobs and waiting on them through the real API server, with the product's own
synchronous client (tfjob_operator.client: its Rest, and TFJobClient's `describe`). Objects
are the API server's JSON, as dicts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from support.builders import GROUP, PLURAL, VERSION
from support.examples import claims
from support.waiting import wait_until
from tfjob_operator.apiserver.errors import ApiError, WatchExpired
from tfjob_operator.apiserver.sync import Rest
from tfjob_operator.client import TFJobClient

T = TypeVar("T")
Obj = dict[str, Any]


def rest_of(kubeconfig: str | Path) -> Rest:
    """The product's synchronous client of the cluster `kubeconfig` names."""
    return Rest.of_kubeconfig(kubeconfig)


class TFJobs:
    """TFJob operations in one namespace, under one API group."""

    def __init__(self, kubeconfig: str | Path, namespace: str, group: str = GROUP) -> None:
        self.namespace = namespace
        self.group = group
        self.kubeconfig = kubeconfig
        self.rest = rest_of(kubeconfig)
        self.client = TFJobClient(namespace, rest=self.rest)
        self._jobs = f"/apis/{group}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        self._core = f"/api/v1/namespaces/{namespace}"

    def create(self, body: Mapping[str, Any]) -> Obj:
        """Creates the TFJob, after the examples' claims it mounts (`create_claims`)."""
        self.create_claims(body)
        created: Obj = self.rest.request("POST", self._jobs, dict(body))
        return created

    def create_claims(self, job: Mapping[str, Any]) -> None:
        """The examples' claims `job` mounts that do not exist yet, as `kubectl apply -f` of
        an example's file makes its claim with the job."""
        declared = claims()
        for name in claims_of(job):
            if name in declared and not self._exists(f"{self._core}/persistentvolumeclaims/{name}"):
                self.rest.request("POST", f"{self._core}/persistentvolumeclaims", declared[name])

    def get(self, name: str) -> Obj:
        found: Obj = self.rest.get(f"{self._jobs}/{name}")
        return found

    def exists(self, name: str) -> bool:
        return self._exists(f"{self._jobs}/{name}")

    def _exists(self, path: str) -> bool:
        try:
            self.rest.get(path)
        except ApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def patch_spec(self, name: str, spec: Mapping[str, Any]) -> None:
        self.rest.request(
            "PATCH",
            f"{self._jobs}/{name}",
            {"spec": dict(spec)},
            content_type="application/merge-patch+json",
        )

    def delete(self, name: str, propagation: str = "Background") -> None:
        self.rest.request(
            "DELETE", f"{self._jobs}/{name}", query={"propagationPolicy": propagation}
        )

    def pods(self, name: str) -> list[Obj]:
        return self._children("pods", name)

    def services(self, name: str) -> list[Obj]:
        return self._children("services", name)

    def _children(self, plural: str, name: str) -> list[Obj]:
        listed = self.rest.get(
            f"{self._core}/{plural}", {"labelSelector": f"tfjob.dev/job-name={name}"}
        )
        items: list[Obj] = listed.get("items") or []
        return sorted(items, key=lambda item: str(item["metadata"]["name"]))

    def log(self, pod: str, container: str | None = None) -> str:
        """The log of the pod's container (its only one, or `container`)."""
        query = {"container": container} if container else None
        return self.rest.text(f"{self._core}/pods/{pod}/log", query)

    def delete_pod(self, name: str) -> None:
        self.rest.request("DELETE", f"{self._core}/pods/{name}")

    def delete_namespace(self) -> None:
        """The namespace, in the background (its objects go with it)."""
        self.rest.request("DELETE", self._core, query={"propagationPolicy": "Background"})

    def events(self, name: str) -> list[Obj]:
        """The job's own events (not its pods')."""
        selector = f"involvedObject.kind=TFJob,involvedObject.name={name}"
        items: list[Obj] = (
            self.rest.get(f"{self._core}/events", {"fieldSelector": selector}).get("items") or []
        )
        return items

    def wait_events(self, name: str, reasons: Sequence[str], timeout: float = 30) -> list[Obj]:
        """The job's events once every one of `reasons` is among them: the operator posts
        events in the background, after the writes they report."""
        return self.poll(
            name,
            lambda: self.events(name),
            lambda events: set(reasons) <= {e.get("reason") for e in events},
            f"events {', '.join(reasons)}",
            timeout,
        )

    def wait_for(
        self,
        name: str,
        predicate: Callable[[Obj], bool],
        what: str,
        timeout: float = 120,
    ) -> Obj:
        """Polls the TFJob until `predicate(job)`; on timeout fails with what was seen."""
        return self.poll(name, lambda: self.get(name), predicate, what, timeout)

    def wait_state(self, name: str, state: str, timeout: float = 120) -> Obj:
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
        predicate: Callable[[list[Obj]], bool],
        what: str,
        timeout: float = 60,
    ) -> list[Obj]:
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
        """What a failing test needs to show: the product's `describe` of the job (status,
        replicas, events, failed replicas' log tails), then its status and its pods as
        the API server has them."""
        try:
            job: Obj = self.get(name)
            described = self.client.describe(name)
        except (ApiError, OSError) as error:
            job, described = {"error": str(error)}, ""
        lines = [described, "status: " + json.dumps(job.get("status"), indent=1, sort_keys=True)]
        for pod in self.pods(name):
            metadata, status = pod["metadata"], pod.get("status") or {}
            containers = [
                (c["name"], c.get("state"), c.get("restartCount"))
                for c in status.get("containerStatuses") or []
            ]
            lines.append(
                f"pod {metadata['name']} uid={metadata['uid']} phase={status.get('phase')} "
                f"deleting={'deletionTimestamp' in metadata} "
                f"labels={metadata.get('labels')} containers={containers}"
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

    kubeconfig: str | Path
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
        rest = rest_of(self.kubeconfig)
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = {"labelSelector": f"tfjob.dev/job-name={self.job_name}"}
        seen: set[str] = set()

        def record(pod: Obj) -> None:
            metadata = pod["metadata"]
            if metadata["uid"] in seen:
                return
            seen.add(metadata["uid"])
            generation = (metadata.get("labels") or {}).get("tfjob.dev/replica-generation", "?")
            self.added.append((metadata["name"], generation, metadata["uid"]))

        version: str | None = None
        while not self._stop.is_set():
            if version is None:
                listing = rest.get(path, selector)
                for pod in listing.get("items") or []:
                    record(pod)
                version = str(listing["metadata"]["resourceVersion"])
            query: dict[str, str | int | bool] = {
                **selector,
                "resourceVersion": version,
                "timeoutSeconds": 2,
            }
            try:
                with rest.watch(path, query) as events:
                    for kind, pod in events:
                        version = str(pod["metadata"]["resourceVersion"])
                        if kind != "BOOKMARK":
                            record(pod)
            except WatchExpired:
                version = None  # the watch window expired: list again

    def duplicates(self) -> list[tuple[str, str]]:
        keys = [(name, generation) for name, generation, _ in self.added]
        return sorted({k for k in keys if keys.count(k) > 1})
