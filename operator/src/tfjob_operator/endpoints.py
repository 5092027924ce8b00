"""The operator's HTTP endpoints: /healthz and /readyz for the kubelet's probes, /metrics
for Prometheus.

/healthz (liveness) answers while the event loop runs; /readyz (readiness) once the watch
caches are filled, on the leader and on a standby alike, so that a rolling update waits
for a new operator able to take over at once. The probes are plain HTTP on their port;
/metrics is on its own port, plain, or with a `MetricsGuard` over TLS to callers the API
server authenticates and authorizes (metrics_access.py). They are served on the event loop
(aiohttp); no handler blocks.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .metrics import Metrics
from .metrics_access import MetricsGuard


class Endpoints:
    def __init__(
        self, metrics: Metrics, ready: Callable[[], bool], guard: MetricsGuard | None = None
    ) -> None:
        """With `guard`, /metrics answers only the requests it allows."""
        self.metrics = metrics
        self.ready = ready
        self.guard = guard
        probes = web.Application()
        probes.router.add_get("/healthz", self._healthz)
        probes.router.add_get("/readyz", self._readyz)
        scrapes = web.Application()
        scrapes.router.add_get("/metrics", self._metrics)
        self._runners = [
            web.AppRunner(probes, access_log=None),
            web.AppRunner(scrapes, access_log=None),
        ]

    async def start(
        self, health_port: int, metrics_port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        """Serves the probes on `health_port` and /metrics on `metrics_port`, over TLS
        with `tls`."""
        if health_port == metrics_port:
            raise ValueError(f"the probes and /metrics need two ports, not {health_port} twice")
        probes, scrapes = self._runners
        for runner in self._runners:
            await runner.setup()
        await web.TCPSite(probes, "0.0.0.0", health_port).start()
        await web.TCPSite(scrapes, "0.0.0.0", metrics_port, ssl_context=tls).start()

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches are not synced yet\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.guard is not None:
            verdict = await self.guard.check(request.headers.get("Authorization"))
            if verdict.status != 200:
                headers = {"WWW-Authenticate": "Bearer"} if verdict.status == 401 else None
                return web.Response(status=verdict.status, text=f"{verdict.why}\n", headers=headers)
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
