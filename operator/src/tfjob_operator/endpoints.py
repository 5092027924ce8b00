"""The operator's HTTP endpoints: /healthz for the kubelet's probes, /metrics for Prometheus.

Both are served on the event loop (aiohttp), each on its own port as the chart exposes
them; neither handler blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .metrics import Metrics


class Endpoints:
    def __init__(self, metrics: Metrics, healthy: Callable[[], bool]) -> None:
        self.metrics = metrics
        self.healthy = healthy
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self, health_port: int, metrics_port: int) -> None:
        await self._runner.setup()
        for port in dict.fromkeys((health_port, metrics_port)):
            await web.TCPSite(self._runner, "0.0.0.0", port).start()

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        if self.healthy():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="caches are not synced yet\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
