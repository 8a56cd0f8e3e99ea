"""The operator's HTTP endpoints for kubelet probes and Prometheus: /healthz, /readyz, /metrics.

Served by aiohttp (kopf's own HTTP library, so nothing new is installed) on the operator's event
loop; unlike uvicorn it leaves the process's signal handling to the operator.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"


class ProbeEndpoints:
    """Liveness, readiness and metrics on one port."""

    def __init__(self, metrics: Callable[[], bytes], ready: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self.port = 0

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_page)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready: standby, or initial indexing not finished\n")

    async def _metrics_page(self, request: web.Request) -> web.Response:
        body = self._metrics()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_METRICS})

    async def start(self, host: str, port: int) -> None:
        """Listen on `host`:`port` (0: any free port, read back into `port`)."""
        self._runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
