"""Synchronous HTTP to the API server: the standard library only.

The client, the local cluster, the chaos run and the bench's cluster reach the API server
(and the other HTTP APIs beside it: etcd, a component's health, Toxiproxy) through it. A
notebook installs the client without the controller's aiohttp (`pip install
tfjob-operator`), and these callers make a handful of requests a second at most, so
`urllib` suffices. Objects go out as JSON built from data and come back as dicts (a body
that is not JSON, as text); a refusal raises the operator's own `ApiError`. A 401 re-reads
the token once (a rotated file, an expired exec-plugin token) before it counts.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.client import HTTPResponse
from pathlib import Path
from typing import Any, Final

from . import JSON
from .connection import Connection, TokenSource, load_connection
from .errors import ApiError, watch_event

#: The longest a request may take, a stream's wait for its next line excepted.
TIMEOUT_SECONDS: Final = 30.0
#: Tries of a replace that conflicts with another writer of the same object.
CONFLICT_ATTEMPTS: Final = 5

Query = Mapping[str, str | int | bool]


class Rest:
    """GET, POST, PATCH and DELETE of JSON, and line streams (logs), on one connection's
    credentials. Safe to share between threads (each request opens its own socket)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        #: The TLS context of its connections (None for http://), for port-forward.py too.
        self.ssl_context = _ssl_context(connection)
        self._token_lock = threading.Lock()

    @classmethod
    def of_kubeconfig(
        cls, kubeconfig: str | Path | None = None, context: str | None = None
    ) -> Rest:
        """As the kubeconfig says, at `context` or its current one (none: $KUBECONFIG or
        ~/.kube/config; in a pod, its service account), as kubectl reads it."""
        return cls(load_connection(None if kubeconfig is None else str(kubeconfig), context))

    @classmethod
    def at(cls, server: str, ssl_context: ssl.SSLContext | None = None) -> Rest:
        """To `server` with no token: as the TLS context's client certificate, if any (the
        local cluster's admin, a component's health), or over plain HTTP."""
        return cls(Connection(server.rstrip("/"), ssl_context or True, TokenSource()))

    def get(self, path: str, query: Query | None = None) -> Any:
        return self.request("GET", path, query=query)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Query | None = None,
        content_type: str = JSON,
        timeout: float = TIMEOUT_SECONDS,
    ) -> Any:
        """The decoded answer (text if it is not JSON); raises ApiError for any status but
        2xx."""
        with self._open(method, path, body, query, content_type, timeout) as answer:
            data = answer.read()
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode(errors="replace")

    def ok(self, path: str, timeout: float = 2) -> bool:
        """Whether GET `path` answers 2xx; any connection problem counts as not ready (a
        readiness probe)."""
        try:
            self.request("GET", path, timeout=timeout)
        except (ApiError, OSError):
            return False
        return True

    def create_or_replace(self, collection: str, body: Mapping[str, Any]) -> None:
        """PUT over the object if it exists (a restarted cluster keeps its objects), else
        POST it. Looked up first: POSTing a Service whose clusterIP its earlier copy holds
        fails as Invalid (IP already allocated), not as AlreadyExists. A PUT that lost to
        another writer (409: a restarted controller updates what it owns) is tried again on
        the newer version, as client-go's RetryOnConflict does."""
        path = f"{collection}/{body['metadata']['name']}"
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                current = self.request("GET", path)
            except ApiError as error:
                if error.status != 404:
                    raise
                self.request("POST", collection, body)
                return
            version = current["metadata"]["resourceVersion"]
            replacement = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            try:
                self.request("PUT", path, replacement)
                return
            except ApiError as error:
                if error.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                    raise

    def text(self, path: str, query: Query | None = None) -> str:
        with self._open("GET", path, None, query, JSON, TIMEOUT_SECONDS) as answer:
            return answer.read().decode(errors="replace")

    @contextmanager
    def lines(self, path: str, query: Query | None = None) -> Iterator[Iterator[str]]:
        """The answer's lines as they arrive (a followed log); the stream is closed when
        the block ends. The wait for a line has no limit: a quiet log is not a failure."""
        with self._open("GET", path, None, query, JSON, None) as answer:
            yield (raw.decode(errors="replace").rstrip("\n") for raw in answer)

    @contextmanager
    def watch(self, path: str, query: Query) -> Iterator[Iterator[tuple[str, dict[str, Any]]]]:
        """The events of one watch of `path` (`query` says from which version, with which
        selector) as (type, object), bookmarks included; closed when the block ends. Raises
        WatchExpired when the version is gone (410), ApiError for another ERROR event."""
        what = f"watch {path}"
        with self.lines(path, {**query, "watch": True}) as lines:
            yield (watch_event(json.loads(line), what) for line in lines if line.strip())

    @contextmanager
    def _open(
        self,
        method: str,
        path: str,
        body: Any,
        query: Query | None,
        content_type: str,
        timeout: float | None,
    ) -> Iterator[HTTPResponse]:
        url = self.connection.server + path
        if query:
            url += "?" + urllib.parse.urlencode({k: _query_value(v) for k, v in query.items()})
        data = json.dumps(body).encode() if body is not None else None
        what = f"{method} {path}"
        for attempt in (1, 2):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Accept", JSON)
            if data is not None:
                request.add_header("Content-Type", content_type)
            with self._token_lock:
                header = self.connection.tokens.header_now(refresh=attempt == 2)
            if header:
                request.add_header("Authorization", header)
            try:
                answer = urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context)
            except urllib.error.HTTPError as error:
                payload = error.read()
                error.close()
                if error.code == 401 and attempt == 1:
                    continue
                raise ApiError(error.code, what, payload) from None
            except urllib.error.URLError as error:
                raise ConnectionError(f"{what}: {self.connection.server}: {error.reason}") from None
            with answer:
                yield answer
            return


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _ssl_context(connection: Connection) -> ssl.SSLContext | None:
    if not connection.server.startswith("https://"):
        return None
    if isinstance(connection.ssl_context, ssl.SSLContext):
        return connection.ssl_context
    return ssl.create_default_context()
