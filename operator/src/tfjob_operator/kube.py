"""The thin layer that writes to the Kubernetes API (kubernetes_asyncio).

Responses are read raw (`_preload_content=False`): the controller needs the status code,
not a deserialized V1Pod, and skipping model deserialization is most of a create's cost.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf
from kubernetes_asyncio import client, config

from .api import FIELD_MANAGER, GROUP, PLURAL, VERSION

_MERGE_PATCH = "application/merge-patch+json"
NAMESPACE_TERMINATING = "NamespaceTerminating"


class ApiError(RuntimeError):
    """A write the API server refused for a reason the controller cannot handle itself."""

    def __init__(self, status: int, what: str, body: bytes) -> None:
        try:
            payload = json.loads(body)
            detail = payload.get("message", "")
            causes = (payload.get("details") or {}).get("causes") or []
        except (ValueError, AttributeError):
            detail = body[:200].decode(errors="replace")
            causes = []
        super().__init__(f"{what}: HTTP {status}: {detail}")
        self.status = status
        self.causes = frozenset(str(c.get("reason")) for c in causes if isinstance(c, dict))

    @property
    def namespace_terminating(self) -> bool:
        """The namespace is being deleted: it accepts no new objects, and takes the job too."""
        return self.status == 403 and NAMESPACE_TERMINATING in self.causes


async def load_configuration() -> client.Configuration:
    """In-cluster credentials when running in a pod, else $KUBECONFIG or ~/.kube/config."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # Read $KUBECONFIG now: the client library captured it at import time.
        await config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
        )
    return configuration


async def kopf_credentials() -> kopf.ConnectionInfo:
    """The same identity for kopf's watches as for the writes; called again on a 401.

    Loading again each time picks up a rotated service-account token.
    """
    configuration = await load_configuration()
    header = await configuration.get_api_key_with_prefix("BearerToken")
    scheme, _, token = (header or "").partition(" ")
    if not configuration.host:
        raise kopf.LoginError("the kubeconfig names no API server")
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


class Kube:
    """Creates and deletes a TFJob's children and writes its status.

    `max_in_flight` bounds concurrent requests so that a burst of new TFJobs queues here
    instead of opening hundreds of connections to the API server.
    """

    def __init__(self, api_client: client.ApiClient, max_in_flight: int = 32) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._slots = asyncio.Semaphore(max_in_flight)

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """True if created, False if a pod of that name already exists."""
        return await self._create(self.core.create_namespaced_pod, namespace, body, "pod")

    async def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return await self._create(self.core.create_namespaced_service, namespace, body, "service")

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """True if this call started the deletion; False if the pod was already gone."""
        return await self._delete(self.core.delete_namespaced_pod, namespace, name, uid, "pod")

    async def delete_service(self, namespace: str, name: str, uid: str) -> bool:
        return await self._delete(
            self.core.delete_namespaced_service, namespace, name, uid, "service"
        )

    async def patch_status(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        patch: Mapping[str, Any],
    ) -> str | None:
        """Merge-patches the TFJob's status if it is still at `resource_version`.

        Returns the resourceVersion after the write; None means the object changed since
        the decision was made (HTTP 409) or is gone: the caller decides again from the
        newer object instead of overwriting it.
        """
        body = {"metadata": {"resourceVersion": resource_version}, "status": patch}
        status, payload = await self._send(
            self.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            _content_type=_MERGE_PATCH,
            field_manager=FIELD_MANAGER,
        )
        if status in (404, 409):
            return None
        _raise_for(status, f"patch status of tfjob {namespace}/{name}", payload)
        return str(json.loads(payload)["metadata"]["resourceVersion"])

    async def delete_job(self, namespace: str, name: str, uid: str) -> bool:
        status, payload = await self._send(
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body={"preconditions": {"uid": uid}, "propagationPolicy": "Background"},
        )
        if status in (404, 409):
            return False
        _raise_for(status, f"delete tfjob {namespace}/{name}", payload)
        return True

    async def _create(
        self,
        call: Callable[..., Awaitable[Any]],
        namespace: str,
        body: Mapping[str, Any],
        kind: str,
    ) -> bool:
        status, payload = await self._send(call, namespace, body, field_manager=FIELD_MANAGER)
        if status == 409:
            return False
        _raise_for(status, f"create {kind} {namespace}/{body['metadata']['name']}", payload)
        return True

    async def _delete(
        self,
        call: Callable[..., Awaitable[Any]],
        namespace: str,
        name: str,
        uid: str,
        kind: str,
    ) -> bool:
        options = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
        status, payload = await self._send(call, name, namespace, body=options)
        # 404: already gone; 409: the name now belongs to a newer object, which is not ours
        # to delete.
        if status in (404, 409):
            return False
        _raise_for(status, f"delete {kind} {namespace}/{name}", payload)
        return True

    async def _send(
        self, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        async with self._slots:
            response = await call(*args, _preload_content=False, **kwargs)
            try:
                return int(response.status), await response.read()
            finally:
                response.release()


def _raise_for(status: int, what: str, payload: bytes) -> None:
    if not 200 <= status < 300:
        raise ApiError(status, what, payload)
