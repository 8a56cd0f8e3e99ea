"""The registry's outermost ASGI layer: size limits, request metrics, and no unhandled 500s.

A plain ASGI middleware (not Starlette's BaseHTTPMiddleware, which adds a task per request):
over-long paths or query strings get a JSON 414 before routing; every request is timed and
counted under a bounded route label; an exception that escapes a handler becomes a JSON 500
with the cause logged, rather than a dropped connection.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pallas_api import names
from pallas_registry.metrics import RegistryMetrics
from pallas_registry.responses import error_body

log = logging.getLogger("pallas.registry")

MAX_PATH = 2048
MAX_QUERY = 4096
WELL_KNOWN = "/.well-known/mcp/server.json"
SERVERS = "/v0.1/servers"
FLEET = "/mcp"
_FIXED_ROUTES = {
    WELL_KNOWN: "well_known",
    SERVERS: "servers",
    "/a2a/agent-cards": "agent_cards",
    names.MCP_CATALOG_PATH: "catalog",
    "/healthz": "healthz",
    "/readyz": "readyz",
    "/metrics": "metrics",
    FLEET: "fleet",
}


def route_label(path: str) -> str:
    """The bounded `route` label of a request path."""
    if path.startswith(SERVERS + "/"):
        return "server"
    return _FIXED_ROUTES.get(path, "other")


async def _send_json(send: Send, status: int, message: str) -> None:
    body = error_body(status, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """Wraps the registry app; see the module docstring."""

    def __init__(self, app: ASGIApp, metrics: RegistryMetrics) -> None:
        """Guard `app`, recording into `metrics`."""
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection scope."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        sent_start = False

        async def recording_send(message: Message) -> None:
            nonlocal status, sent_start
            if message["type"] == "http.response.start":
                status = message["status"]
                sent_start = True
            await send(message)

        path: str = scope["path"]
        try:
            # Some clients' ASGI adapters leave the query on raw_path; measure the path alone.
            raw_path: bytes = scope.get("raw_path") or path.encode()
            if len(raw_path.partition(b"?")[0]) > MAX_PATH:
                await _send_json(recording_send, 414, f"request path longer than {MAX_PATH} bytes")
            elif len(scope.get("query_string", b"")) > MAX_QUERY:
                await _send_json(recording_send, 414, f"query string longer than {MAX_QUERY} bytes")
            else:
                await self.app(scope, receive, recording_send)
        except Exception:
            log.exception("registry: unhandled error serving %s", path[:200])
            # Starlette's error middleware has usually answered already (it re-raises for the
            # server's log, which is this one); otherwise answer here.
            if not sent_start:
                await _send_json(recording_send, 500, "internal error")
        finally:
            self.metrics.observe(route_label(path), status, time.perf_counter() - started)
