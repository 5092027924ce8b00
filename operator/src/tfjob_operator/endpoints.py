"""The operator's HTTP endpoints: /healthz and /readyz for the kubelet's probes, /metrics
for Prometheus.

/healthz (liveness) answers while the event loop runs; /readyz (readiness) once the watch
caches are filled, on the leader and on a standby alike, so that a rolling update waits
for a new operator able to take over at once. They are served on the event loop
(aiohttp), the probes and the metrics each on the port the chart exposes; no handler
blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .metrics import Metrics


class Endpoints:
    def __init__(self, metrics: Metrics, ready: Callable[[], bool]) -> None:
        self.metrics = metrics
        self.ready = ready
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self, health_port: int, metrics_port: int) -> None:
        await self._runner.setup()
        for port in dict.fromkeys((health_port, metrics_port)):
            await web.TCPSite(self._runner, "0.0.0.0", port).start()

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches are not synced yet\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
