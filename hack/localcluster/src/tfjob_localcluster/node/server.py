"""The node's HTTPS endpoint (kubelet's port): container logs, pod list, and a test hook.

The API server reaches it at the Node's InternalIP and daemonEndpoints port with its
kubelet client certificate, which this server requires (signed by the cluster CA,
with a user named in `kubelet_client_users`, or in group system:masters):

- `GET /containerLogs/{namespace}/{pod}/{container}`: what `kubectl logs` reads, with
  `follow`, `previous`, `tailLines`, `timestamps`, `sinceSeconds`, `sinceTime` and
  `limitBytes`, as kubelet serves them.
- `GET /pods`: the pods this node runs (as kubelet's read-only listing).
- `exec`, `attach`, `portForward`, `run`: answered 501 (not supported).
- `POST /debug/evict/{namespace}/{pod}`: TEST-ONLY hook standing in for node-pressure
  eviction (there is no real memory pressure to provoke): kills the pod's containers
  and reports the pod as kubelet's eviction manager does (phase Failed, reason
  Evicted, condition DisruptionTarget/TerminationByKubelet). Reach it through the API
  server: `POST /api/v1/nodes/<node>/proxy/debug/evict/<namespace>/<pod>`.
- `POST /debug/signal/{namespace}/{pod}/{container}/{signal}` (e.g. `.../KILL`): TEST-ONLY, what
  `docker kill --signal` or `crictl stop` would do on a real node: sends the signal to
  the container's process, as a crash or the kernel's OOM killer would end it. The pod
  then reports the exit as kubelet does.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tfjob_localcluster.node.config import NodeConfig
from tfjob_localcluster.node.logs import LogOptions, parse_timestamp, stream_log

if TYPE_CHECKING:
    from tfjob_localcluster.node.pods import PodWorker

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _subject(peer: dict[str, Any] | None) -> tuple[str, set[str]]:
    """(common name, organizations) of a verified peer certificate."""
    user, groups = "", set()
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.add(value)
    return user, groups


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("true", "1")


def _int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer, got {value!r}") from None


def log_options(request: web.Request) -> LogOptions:
    since: datetime.datetime | None = None
    if (seconds := _int(request, "sinceSeconds")) is not None:
        since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    elif value := request.query.get("sinceTime"):
        try:
            since = parse_timestamp(value)
        except ValueError:
            raise web.HTTPBadRequest(text=f"sinceTime is not RFC 3339: {value!r}") from None
    tail = _int(request, "tailLines")
    return LogOptions(
        follow=_flag(request, "follow"),
        tail_lines=tail if tail is not None and tail >= 0 else None,
        since=since,
        timestamps=_flag(request, "timestamps"),
        limit_bytes=_int(request, "limitBytes"),
    )


class NodeServer:
    def __init__(
        self, config: NodeConfig, host_ip: str, workers: Callable[[], Iterable[PodWorker]]
    ) -> None:
        self.config = config
        self.host_ip = host_ip
        self._workers = workers
        self._runner: web.AppRunner | None = None
        self.port = 0

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.config.client_ca)
        context.load_cert_chain(self.config.serving_cert, self.config.serving_key)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def start(self) -> int:
        app = web.Application(middlewares=[self._authorize])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/pods", self._pods)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        app.router.add_post("/debug/evict/{namespace}/{pod}", self._evict)
        app.router.add_post("/debug/signal/{namespace}/{pod}/{container}/{signal}", self._signal)
        for streaming in ("exec", "attach", "portForward", "run"):
            app.router.add_route("*", f"/{streaming}/{{tail:.*}}", self._unsupported)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host_ip, 0))
        self.port = int(listener.getsockname()[1])
        await web.SockSite(self._runner, listener, ssl_context=self._tls()).start()
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        user, groups = _subject(
            request.transport.get_extra_info("peercert") if request.transport else None
        )
        if user not in self.config.kubelet_client_users and "system:masters" not in groups:
            raise web.HTTPForbidden(text=f"user {user!r} may not use the node's API")
        return await handler(request)

    async def _unsupported(self, request: web.Request) -> web.Response:
        feature = request.path.split("/")[1]
        raise web.HTTPNotImplemented(
            text=f"{feature} is not supported by the tfjob-localcluster process node"
        )

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _pods(self, _request: web.Request) -> web.Response:
        items = [worker.pod for worker in self._workers() if not worker.gone]
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        )

    def _find(self, namespace: str, name: str) -> PodWorker:
        matching = [w for w in self._workers() if w.namespace == namespace and w.name == name]
        if not matching:
            raise web.HTTPNotFound(
                text=f'pod "{name}" in namespace "{namespace}" is not on this node'
            )
        return matching[-1]

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        worker = self._find(request.match_info["namespace"], request.match_info["pod"])
        container = request.match_info["container"]
        record = next(
            (r for r in worker.init_records + worker.records if r.name == container), None
        )
        if record is None:
            raise web.HTTPBadRequest(
                text=f"container {container} is not valid for pod {worker.name}"
            )
        instances = worker.log_instances(container)
        if not instances:
            reason = record.state.get("waiting", {}).get("reason", "ContainerCreating")
            raise web.HTTPBadRequest(
                text=f'container "{container}" in pod "{worker.name}" is waiting to start: {reason}'
            )
        instance = instances[-1]
        if _flag(request, "previous"):
            instance -= 1
            if instance not in instances:
                raise web.HTTPBadRequest(
                    text=f'previous terminated container "{container}" in pod "{worker.name}" '
                    "not found"
                )
        options = log_options(request)
        runner = worker.runners.get(container)
        process = runner.processes.get(instance) if runner else None
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        finished = (lambda: process.finished) if process is not None else (lambda: True)
        async for chunk in stream_log(worker.log_path(container, instance), options, finished):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def _signal(self, request: web.Request) -> web.Response:
        worker = self._find(request.match_info["namespace"], request.match_info["pod"])
        name = request.match_info["container"]
        runner = worker.runners.get(name)
        if runner is None or runner.process is None or runner.process.finished:
            raise web.HTTPConflict(text=f"container {name} of pod {worker.name} is not running")
        try:
            number = signal.Signals[f"SIG{request.match_info['signal'].upper()}"]
        except KeyError:
            raise web.HTTPBadRequest(text="unknown signal") from None
        os.kill(runner.process.pid, number)
        return web.json_response({"signalled": runner.process.pid, "signal": number.name})

    async def _evict(self, request: web.Request) -> web.Response:
        worker = self._find(request.match_info["namespace"], request.match_info["pod"])
        if worker.terminal:
            raise web.HTTPConflict(text=f"pod {worker.name} is not running")
        resource = request.query.get("resource", "memory")
        threshold = request.query.get("threshold", "100Mi")
        available = request.query.get("available", "0")
        message = (
            f"The node was low on resource: {resource}. "
            f"Threshold quantity: {threshold}, available: {available}. "
        )
        worker.evict(resource, message)
        return web.json_response(
            {"evicted": f"{worker.namespace}/{worker.name}", "message": message}, status=202
        )
