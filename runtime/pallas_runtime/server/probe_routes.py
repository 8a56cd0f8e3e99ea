"""The agent's HTTP routes beside `/mcp`: `/healthz`, `/readyz` and `/metrics` (docs/api.md §3).

They are never behind inbound auth (`auth/`): kubelet probes and scrapers carry no caller.
"""

from __future__ import annotations

from collections.abc import Callable

from fastmcp import FastMCP
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from pallas_runtime import __version__
from pallas_runtime.metrics import CONTENT_TYPE, RuntimeMetrics


class ProbeRoutes:
    """Liveness, readiness and the metrics exposition of one agent."""

    def __init__(
        self, ready: Callable[[], bool], draining: Callable[[], bool], metrics: RuntimeMetrics
    ) -> None:
        self._ready = ready
        self._draining = draining
        self._metrics = metrics

    def add_to(self, mcp: FastMCP) -> None:
        """Serve the three routes with the MCP app."""
        mcp.custom_route("/healthz", methods=["GET"])(self.healthz)
        mcp.custom_route("/readyz", methods=["GET"])(self.readyz)
        mcp.custom_route("/metrics", methods=["GET"])(self.metrics)

    async def healthz(self, _: Request) -> Response:
        """The process is alive."""
        return JSONResponse({"status": "alive", "version": __version__})

    async def readyz(self, _: Request) -> Response:
        """The lifespan has run and no drain has begun: the agent takes new sessions.

        503 `starting` before, `draining` from SIGTERM on: the pod leaves its Service's endpoints
        while the turns in flight finish (`AgentServer.drain`).
        """
        if self._draining():
            return JSONResponse({"status": "draining"}, status_code=503)
        if self._ready():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "starting"}, status_code=503)

    async def metrics(self, _: Request) -> Response:
        """The Prometheus text of the agent's registry."""
        return PlainTextResponse(self._metrics.exposition(), media_type=CONTENT_TYPE)
