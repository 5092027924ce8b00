"""A minimal blocking HTTPS client for the launcher: readiness probes and bootstrap objects.

The launcher runs before any Kubernetes client is configured and must not depend on
one; it only needs a handful of JSON requests authenticated by a client certificate. A
refusal is the operator's `ApiError`, as every client of the project raises it.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tfjob_localcluster.local.pki import KeyPair
from tfjob_operator.errors import ApiError

#: Tries of a replace that conflicts with a controller's write of the same object.
CONFLICT_ATTEMPTS = 5


def tls_context(ca_cert: Path, client: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


class Rest:
    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server.rstrip("/")
        self.context = context

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=timeout) as reply:
                text = reply.read().decode()
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, f"{method} {path}", error.read()) from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def ok(self, path: str, timeout: float = 2) -> bool:
        """Whether GET `path` answers 200 (any connection problem counts as not ready)."""
        try:
            self.request("GET", path, timeout=timeout)
        except (ApiError, OSError):
            return False
        return True

    def create_or_replace(self, collection: str, body: dict[str, Any]) -> None:
        """PUT over the object if it exists (a restarted cluster keeps its objects), else
        POST it. Looked up first: POSTing a Service whose clusterIP its earlier copy holds
        fails as Invalid (IP already allocated), not as AlreadyExists. A PUT that lost to a
        controller's write (409: the restarted controllers update what they own) is tried
        again on the newer version, as client-go's RetryOnConflict does."""
        path = f"{collection}/{body['metadata']['name']}"
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                current = self.request("GET", path)
            except ApiError as error:
                if error.status != 404:
                    raise
                self.request("POST", collection, body)
                return
            replacement = {**body, "metadata": {**body["metadata"], **_version(current)}}
            try:
                self.request("PUT", path, replacement)
                return
            except ApiError as error:
                if error.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                    raise


def _version(current: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": current["metadata"]["resourceVersion"]}
