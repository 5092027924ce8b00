"""The operator's writes to the Kubernetes API: its children, the TFJob's status and
deletion, events, and what the integrations create, each as the request it is, on the
async front (apiserver/aio.py), which holds the write slots and the fence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import Any, Final

import orjson

from .api import FIELD_MANAGER, KUEUE_WORKLOADS_PATH, LABEL_CONTROLLER_UID, PLURAL, JobRef
from .apiserver import MERGE_PATCH
from .apiserver.aio import ApiServerClient, Priority, collection_path, raise_for
from .observe import (
    FlavorObservation,
    PodGroupObservation,
    PriorityClass,
    WorkloadObservation,
    observe_flavor,
    observe_workload,
)

#: Where the classes a Kueue Workload's priority comes from are read, by kind.
PRIORITY_CLASSES: Final = {
    "WorkloadPriorityClass": f"{KUEUE_WORKLOADS_PATH}/workloadpriorityclasses",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
}
#: Collection deletes (a finished job's clean-up) in flight at most: each makes the API
#: server delete many objects, and a burst of them would delay the status writes that
#: report other jobs finished.
MAX_CLEANUPS_IN_FLIGHT: Final = 4


class Kube:
    """The writes of the controller: children, the TFJob's status, its deletion, events."""

    def __init__(self, api: ApiServerClient) -> None:
        self.api = api
        self._cleanups = asyncio.Semaphore(MAX_CLEANUPS_IN_FLIGHT)

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """True if created, False if a pod of that name already exists."""
        return await self._create(namespace, "pods", body)

    async def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return await self._create(namespace, "services", body)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """True if this call started the deletion; False if the pod was already gone."""
        return await self._delete(collection_path(namespace, "pods"), name, uid, "pod")

    async def delete_service(self, namespace: str, name: str, uid: str) -> bool:
        return await self._delete(collection_path(namespace, "services"), name, uid, "service")

    async def create_pod_group(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """True if created, False if a PodGroup of that name already exists."""
        return await self._create(namespace, "podgroups", body, f"/apis/{body['apiVersion']}")

    async def patch_pod_group(
        self, namespace: str, group: PodGroupObservation, patch: Mapping[str, Any]
    ) -> None:
        """Merge-patches the PodGroup if it is still the object `group` was read from."""
        path = collection_path(namespace, "podgroups", f"/apis/{group.api_version}")
        status, payload = await self.api.send(
            "PATCH",
            f"{path}/{group.name}",
            body={**patch, "metadata": {"uid": group.uid}},
            params={"fieldManager": FIELD_MANAGER},
            content_type=MERGE_PATCH,
        )
        # Gone, or replaced by another object of the name: the next decision sees which.
        if status in (404, 409):
            return
        raise_for(status, f"patch podgroup {namespace}/{group.name}", payload)

    async def delete_pod_group(self, namespace: str, group: PodGroupObservation) -> bool:
        path = collection_path(namespace, "podgroups", f"/apis/{group.api_version}")
        return await self._delete(path, group.name, group.uid, "podgroup")

    async def create_workload(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """True if created, False if a Workload of that name already exists."""
        return await self._create(namespace, "workloads", body, f"/apis/{body['apiVersion']}")

    async def delete_workload(self, namespace: str, workload: WorkloadObservation) -> bool:
        path = collection_path(namespace, "workloads", KUEUE_WORKLOADS_PATH)
        return await self._delete(path, workload.name, workload.uid, "workload")

    async def read_workload(self, namespace: str, name: str) -> WorkloadObservation | None:
        """The Workload `name`; None if there is none."""
        path = collection_path(namespace, "workloads", KUEUE_WORKLOADS_PATH)
        status, payload = await self.api.send("GET", f"{path}/{name}")
        if status == 404:
            return None
        raise_for(status, f"get workload {namespace}/{name}", payload)
        return observe_workload(orjson.loads(payload))

    async def patch_workload(
        self,
        namespace: str,
        workload: WorkloadObservation,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> None:
        """Merge-patches the Workload (its metadata), or its `status`; `patch` names the
        resourceVersion it was built from, and a Workload changed since is left to the next
        decision."""
        path = f"{collection_path(namespace, 'workloads', KUEUE_WORKLOADS_PATH)}/{workload.name}"
        answer, payload = await self.api.send(
            "PATCH",
            f"{path}/status" if status else path,
            body=patch,
            params={"fieldManager": FIELD_MANAGER},
            content_type=MERGE_PATCH,
        )
        if answer in (404, 409):
            return
        what = "status of workload" if status else "workload"
        raise_for(answer, f"patch {what} {namespace}/{workload.name}", payload)

    async def patch_job(self, job: JobRef, resource_version: str, patch: Mapping[str, Any]) -> None:
        """Merge-patches the TFJob itself if it is still at `resource_version`; one changed
        since is left to the next decision."""
        status, payload = await self.api.send(
            "PATCH",
            f"{collection_path(job.namespace, PLURAL, job.api.path)}/{job.name}",
            body={**patch, "metadata": {"resourceVersion": resource_version}},
            params={"fieldManager": FIELD_MANAGER},
            content_type=MERGE_PATCH,
            priority=Priority.DECISION,
        )
        if status in (404, 409):
            return
        raise_for(status, f"patch tfjob {job.namespace}/{job.name}", payload)

    async def read_resource_flavor(self, name: str) -> FlavorObservation | None:
        """The ResourceFlavor `name`; None if there is none, or the operator may not read
        it (a namespaced install)."""
        status, payload = await self.api.send(
            "GET", f"{KUEUE_WORKLOADS_PATH}/resourceflavors/{name}"
        )
        if status in (403, 404):
            return None
        raise_for(status, f"get resourceflavor {name}", payload)
        return observe_flavor(orjson.loads(payload))

    async def read_priority_class(self, kind: str, name: str) -> int | None:
        """The value of the WorkloadPriorityClass or PriorityClass `name`; None if there is
        none. ApiError 403 where the operator may not read it (a namespaced install)."""
        status, payload = await self.api.send("GET", f"{PRIORITY_CLASSES[kind]}/{name}")
        if status == 404:
            return None
        raise_for(status, f"get {kind} {name}", payload)
        return int(orjson.loads(payload).get("value") or 0)

    async def list_priority_classes(self) -> list[PriorityClass]:
        """The cluster's PriorityClasses. ApiError 403 where the operator may not list them."""
        status, payload = await self.api.send("GET", PRIORITY_CLASSES["PriorityClass"])
        raise_for(status, "list priorityclasses", payload)
        return [
            PriorityClass(
                str(c["metadata"]["name"]), int(c.get("value") or 0), bool(c.get("globalDefault"))
            )
            for c in orjson.loads(payload)["items"]
        ]

    async def delete_collection(
        self, namespace: str, plural: str, job_uid: str, keep: Collection[str]
    ) -> list[tuple[str, str]]:
        """Deletes the job's `plural` (by its uid label) except those named in `keep`.

        Returns the name and uid of each object the call deleted.
        """
        params = {"labelSelector": f"{LABEL_CONTROLLER_UID}={job_uid}"}
        if keep:
            params["fieldSelector"] = ",".join(f"metadata.name!={name}" for name in sorted(keep))
        async with self._cleanups:
            status, payload = await self.api.send(
                "DELETE",
                collection_path(namespace, plural),
                body={"propagationPolicy": "Background"},
                params=params,
                priority=Priority.CLEANUP,
            )
        raise_for(status, f"delete {plural} of tfjob uid {job_uid} in {namespace}", payload)
        return [
            (str(item["metadata"]["name"]), str(item["metadata"]["uid"]))
            for item in orjson.loads(payload).get("items") or []
        ]

    async def delete_job(self, job: JobRef) -> bool:
        path = collection_path(job.namespace, PLURAL, job.api.path)
        return await self._delete(path, job.name, job.uid, "tfjob")

    async def patch_status(
        self,
        job: JobRef,
        resource_version: str,
        patch: Mapping[str, Any],
        *,
        decision: bool,
    ) -> str | None:
        """Merge-patches the TFJob's status if it is still at `resource_version`.

        A `decision` goes ahead of every other write; a status that only reports progress
        goes behind other jobs' children, so that it never slows their creation.

        Returns the resourceVersion after the write; None means the object changed since
        the decision was made (HTTP 409) or is gone: the caller decides again from the
        newer object instead of overwriting it.
        """
        status, payload = await self.api.send(
            "PATCH",
            f"{collection_path(job.namespace, PLURAL, job.api.path)}/{job.name}/status",
            body={"metadata": {"resourceVersion": resource_version}, "status": patch},
            params={"fieldManager": FIELD_MANAGER},
            content_type=MERGE_PATCH,
            priority=Priority.DECISION if decision else Priority.PROGRESS,
        )
        if status in (404, 409):
            return None
        raise_for(status, f"patch status of tfjob {job.namespace}/{job.name}", payload)
        return str(orjson.loads(payload)["metadata"]["resourceVersion"])

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> str:
        """Returns the created Event's name."""
        status, payload = await self.api.send(
            "POST", collection_path(namespace, "events"), body=body, priority=Priority.EVENT
        )
        raise_for(status, f"create event in {namespace}", payload)
        return str(orjson.loads(payload)["metadata"]["name"])

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patches an Event; False if it is gone (events expire, an hour by default)."""
        status, payload = await self.api.send(
            "PATCH",
            f"{collection_path(namespace, 'events')}/{name}",
            body=patch,
            content_type=MERGE_PATCH,
            priority=Priority.EVENT,
        )
        if status == 404:
            return False
        raise_for(status, f"patch event {namespace}/{name}", payload)
        return True

    async def create_object(
        self, namespace: str, group_path: str, plural: str, body: Mapping[str, Any]
    ) -> bool:
        """Any namespaced object an integration makes (integrations/): True if created,
        False if one of that name already exists."""
        return await self._create(namespace, plural, body, group_path)

    async def delete_object(
        self, namespace: str, group_path: str, plural: str, name: str, uid: str
    ) -> bool:
        """Deletes the object of that name if it is still the one of `uid`: True if this
        call started the deletion."""
        collection = collection_path(namespace, plural, group_path)
        return await self._delete(collection, name, uid, plural)

    async def _create(
        self, namespace: str, plural: str, body: Mapping[str, Any], group_path: str = "/api/v1"
    ) -> bool:
        status, payload = await self.api.send(
            "POST",
            collection_path(namespace, plural, group_path),
            body=body,
            params={"fieldManager": FIELD_MANAGER},
        )
        if status == 409:
            return False
        kind = plural[:-1]
        raise_for(status, f"create {kind} {namespace}/{body['metadata']['name']}", payload)
        return True

    async def _delete(self, collection: str, name: str, uid: str, kind: str) -> bool:
        status, payload = await self.api.send(
            "DELETE",
            f"{collection}/{name}",
            body={"preconditions": {"uid": uid}, "propagationPolicy": "Background"},
        )
        # 404: already gone; 409: the name now belongs to a newer object, which is not ours
        # to delete.
        if status in (404, 409):
            return False
        raise_for(status, f"delete {kind} {collection}/{name}", payload)
        return True
