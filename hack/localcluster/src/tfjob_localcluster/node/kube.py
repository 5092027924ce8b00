"""Dict-in, dict-out access to the API server on top of kubernetes_asyncio's client.

kubernetes_asyncio provides the kubeconfig handling, TLS and connection pooling; this
layer keeps Kubernetes objects as plain dicts (as they are on the wire), chooses the
patch content type explicitly and streams watches line by line.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import load_kube_config

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            status_obj = json.loads(body)
            self.reason = str(status_obj.get("reason", ""))
            message = str(status_obj.get("message", body))
        except (json.JSONDecodeError, AttributeError):
            self.reason = ""
            message = body
        super().__init__(f"HTTP {status} {self.reason}: {message}")


class Kube:
    def __init__(self, client: ApiClient) -> None:
        self._client = client

    @classmethod
    async def from_kubeconfig(cls, path: Path) -> Kube:
        configuration = Configuration()
        await load_kube_config(config_file=str(path), client_configuration=configuration)
        return cls(ApiClient(configuration))

    async def close(self) -> None:
        await self._client.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: aiohttp.ClientTimeout | float = 30,
    ) -> aiohttp.ClientResponse:
        params = [(key, _query_value(value)) for key, value in (query or {}).items()]
        response: aiohttp.ClientResponse = await self._client.call_api(
            path,
            method,
            query_params=params,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=request_timeout,
        )
        if not 200 <= response.status < 300:
            text = await response.text()
            response.release()
            raise ApiError(response.status, text)
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float = 30,
    ) -> Obj:
        response = await self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            request_timeout=request_timeout,
        )
        async with response:
            result: Obj = json.loads(await response.read() or b"{}")
            return result

    async def get(self, path: str, **query: str | int | bool) -> Obj:
        return await self.request("GET", path, query=query)

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Obj, content_type: str = MERGE_PATCH) -> Obj:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: Obj | None = None) -> Obj:
        return await self.request("DELETE", path, body=body)

    async def watch(
        self, path: str, resource_version: str, **query: str | int | bool
    ) -> AsyncIterator[Obj]:
        """Watch events ({type, object}) from `resource_version` until the server ends it."""
        params: dict[str, str | int | bool] = {
            **query,
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": 300,
        }
        response = await self._send(
            "GET",
            path,
            query=params,
            request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=330),
        )
        async with response:
            # Events are newline-delimited JSON; split by hand, since a single event
            # (a large object) may exceed the stream reader's line limit.
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
