"""A minimal HTTP endpoint for kubelet probes and Prometheus: /healthz, /readyz, /metrics.

Plain asyncio rather than a web framework: three GET routes, and unlike uvicorn it leaves the
process's signal handling to the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"


class ProbeServer:
    """Serves liveness, readiness and metrics on one port."""

    def __init__(self, metrics: Callable[[], bytes], ready: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._ready = ready
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _route(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method != "GET":
            return 405, "text/plain", b"method not allowed\n"
        path = path.split("?", 1)[0]
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            ready = self._ready()
            return (200 if ready else 503), "text/plain", b"ok\n" if ready else b"standby\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_METRICS, self._metrics()
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError, ValueError):
            async with asyncio.timeout(10):
                request = (await reader.readline()).decode("latin-1").split()
                while (await reader.readline()).strip():
                    pass  # headers are not needed
                status, content_type, body = (
                    self._route(*request[:2]) if len(request) >= 2 else (400, "", b"")
                )
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n"
                )
                writer.write(head.encode() + body)
                await writer.drain()
        writer.close()
