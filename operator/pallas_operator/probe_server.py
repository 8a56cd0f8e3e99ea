"""The operator's HTTP endpoints for kubelet probes and Prometheus: /healthz, /readyz, /metrics.

Served by aiohttp (kopf's own HTTP library, so nothing new is installed) on the operator's event
loop; unlike uvicorn it leaves the process's signal handling to the operator.

Every connection reads its requests through `HeadGuard` first, with the limits of the chart's
`metrics.limits` (docs/api.md §3 "Request limits"): aiohttp bounds each line and the number of
header fields, but not a head as a whole, and times no head (its keep-alive timer closes a
connection only while no request has begun). These routes take no body, so the end of a head
(an empty line) is the end of a request, and finding it is all the parsing the guard needs; a
request that announces a body is refused with 413 before aiohttp reads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from http import HTTPStatus

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from pallas_api.fields import HttpLimits

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
END_OF_HEAD = b"\r\n\r\n"
LINGER_SECONDS = 1.0
"""How long a refused connection keeps reading (and dropping) what its client still sends:
closing with unread bytes resets the connection, and the client would often lose the answer."""

log = logging.getLogger(__name__)


class HeadGuard(asyncio.Protocol):
    """Hands aiohttp's protocol each request head once it is whole and within the limits."""

    def __init__(self, inner: RequestHandler, limits: HttpLimits) -> None:
        self._inner = inner
        self._limits = limits
        self._pending = bytearray()
        """The incomplete head received so far (at most `maxHeadBytes` plus one read)."""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Pass the connection on and start the clock for its first head."""
        self._transport = transport  # type: ignore[assignment]
        self._inner.connection_made(transport)
        self._start_timer()

    def data_received(self, data: bytes) -> None:
        """Collect the head; pass each whole one on, or refuse it."""
        if self._refused:
            return
        if not self._pending and self._timer is None:
            self._start_timer()
        self._pending += data
        while not self._refused:
            end = self._pending.find(END_OF_HEAD)
            if end < 0:
                if len(self._pending) > self._limits.max_head_bytes:
                    self._refuse(*self._oversized(bytes(self._pending)))
                return
            head = bytes(self._pending[: end + len(END_OF_HEAD)])
            del self._pending[: end + len(END_OF_HEAD)]
            refusal = self._check(head)
            if refusal is not None:
                self._refuse(*refusal)
                return
            self._stop_timer()
            self._inner.data_received(head)
            if self._pending:
                self._start_timer()  # the next request has begun

    def eof_received(self) -> None:
        """The client is done sending: aiohttp's protocol is told, and the connection closes."""
        self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock and tell aiohttp."""
        self._stop_timer()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        """Flow control is aiohttp's."""
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        """Flow control is aiohttp's."""
        self._inner.resume_writing()

    # --- limits ----------------------------------------------------------------------------------

    def _oversized(self, head: bytes) -> tuple[HTTPStatus, str]:
        request_line = head.split(b"\r\n", 1)[0]
        if len(request_line) > self._limits.max_head_bytes:
            return HTTPStatus.REQUEST_URI_TOO_LONG, f"request line over {self._limits.max_head_bytes} bytes"
        return (
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
            f"request head over {self._limits.max_head_bytes} bytes",
        )

    def _check(self, head: bytes) -> tuple[HTTPStatus, str] | None:
        if len(head) > self._limits.max_head_bytes:
            return self._oversized(head)
        fields = head[: -len(END_OF_HEAD)].split(b"\r\n")[1:]
        if len(fields) > self._limits.max_headers:
            return (
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"more than {self._limits.max_headers} header fields",
            )
        for field in fields:
            name, _, value = field.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
                return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "these endpoints take no request body"
        return None

    def _start_timer(self) -> None:
        """Time a head from now: from the connection's start, or its next request's first byte."""
        self._stop_timer()
        # aiohttp's keep-alive timer would close the connection silently while the head is
        # still coming (it sees no request yet); until the head is whole, ours decides.
        self._inner.keep_alive(True)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._limits.head_timeout_seconds, self._timed_out)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._transport is None or self._transport.is_closing():
            return
        if not self._pending:
            self._transport.close()  # connected and silent: there is nothing to answer
            return
        self._refuse(
            HTTPStatus.REQUEST_TIMEOUT,
            f"request head not complete within {self._limits.head_timeout_seconds:g}s",
        )

    def _refuse(self, status: HTTPStatus, text: str) -> None:
        """Answer, drop what still comes for a moment, close; aiohttp never sees the request."""
        self._refused = True
        self._pending.clear()
        self._stop_timer()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        log.info("refused a request to the operator's endpoints with %d: %s", status.value, text)
        body = text.encode("ascii")
        transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status.value, status.phrase.encode("ascii"), len(body), body)
        )
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)


class ProbeEndpoints:
    """Liveness, readiness and metrics on one port."""

    def __init__(
        self, metrics: Callable[[], bytes], ready: Callable[[], bool], limits: HttpLimits | None = None
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._limits = limits or HttpLimits()
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
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
        limits = self._limits
        self._runner = web.AppRunner(
            self._app(),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=limits.keep_alive_seconds,
            # aiohttp's own bounds, behind the guard's: no line or header count above ours.
            max_line_size=limits.max_head_bytes,
            max_field_size=limits.max_head_bytes,
            max_headers=limits.max_headers,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(lambda: HeadGuard(server(), limits), host, port)
        self.port = int(self._listener.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
