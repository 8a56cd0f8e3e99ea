"""The HTTP transport under every outbound client of an agent: the LLM SDKs and MCP sessions.

Both SDKs and the MCP SDK speak httpx2; httpx-aiohttp's transport sends their requests with
aiohttp, which costs about a third of httpcore2's CPU per request (docs/runtime.md,
Performance). httpx-aiohttp 0.2.0 reports every aiohttp connection failure as a connect
*timeout* (its broad `ClientConnectionError` entry wins over the specific ones, the gap noted in
the review of openai-python#3594), so a refused connection or an unknown host read "timed out
after 5s". This transport re-raises those as what they are, for the request and for reading
the body alike; real timeouts are left as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx2
from httpx_aiohttp.httpx2 import AiohttpTransport as _Base

from pallas_io.tracing import inject_headers

DRAIN_SECONDS = 0.05
"""How long closing a POST's body may wait for the rest of it (see `_Body`)."""
DRAIN_BYTES = 64 * 1024
"""How much of a POST's unread body closing it may read (see `_Body`)."""


def _unmasked(exc: httpx2.ConnectTimeout, request: httpx2.Request | None) -> httpx2.TransportError:
    """What a `ConnectTimeout` from httpx-aiohttp really was."""
    cause = exc.__cause__
    if not isinstance(cause, aiohttp.ClientConnectionError) or isinstance(cause, TimeoutError):
        return exc
    if isinstance(cause, aiohttp.ClientConnectorError):  # refused, unreachable, DNS, TLS
        return httpx2.ConnectError(str(cause), request=request)
    return httpx2.ReadError(str(cause), request=request)  # the server closed or reset the connection


@contextlib.contextmanager
def _connection_failures(request: httpx2.Request | None = None) -> Iterator[None]:
    try:
        yield
    except httpx2.ConnectTimeout as exc:
        real = _unmasked(exc, request)
        if real is exc:
            raise
        raise real from exc.__cause__


class _Body(httpx2.AsyncByteStream):
    """A response body, its connection failures named, that can be finished before it is closed.

    An MCP client stops reading a POST's event stream at the JSON-RPC response and closes it;
    the end of the stream, which the server sends right after, is then still unread and the
    connection cannot be reused: every call paid for a new TCP (and TLS) connection. `drain`
    reads what remains of such a body, briefly and up to a bound, so that the connection goes
    back to the pool.
    """

    def __init__(self, stream: httpx2.AsyncByteStream, *, drain: bool) -> None:
        self._stream = stream
        self._drain = drain

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _connection_failures():
            async for chunk in self._stream:
                yield chunk
        self._drain = False  # read to its end: nothing is left to finish

    async def aclose(self) -> None:
        try:
            if self._drain:
                await self._finish()
        finally:
            with _connection_failures():
                await self._stream.aclose()

    async def _finish(self) -> None:
        with contextlib.suppress(Exception):  # only an optimisation: on any failure, just close
            async with asyncio.timeout(DRAIN_SECONDS):
                left = DRAIN_BYTES
                async for chunk in self._stream:
                    left -= len(chunk)
                    if left < 0:
                        return


def connection_pool(ssl_context: ssl.SSLContext) -> aiohttp.ClientSession:
    """Keep-alive connections that many short-lived httpx2 clients can borrow in turn.

    A connection carries no credential state (each request sends its own headers), and the pool
    keeps no cookies, so nothing one caller's request or response carried reaches the next. No
    limit on connections: each borrowing MCP session may hold one open for its GET stream, and a
    cap would leave concurrent calls waiting on each other's streams.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ssl_context, limit=0), cookie_jar=aiohttp.DummyCookieJar()
    )


class AiohttpTransport(_Base):
    """httpx-aiohttp's transport, its connection failures named as such.

    With `pool`, requests go over that pool's connections and closing the transport leaves the
    pool open for its owner to close.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        pool: aiohttp.ClientSession | None = None,
        trace_headers: bool = False,
    ) -> None:
        super().__init__(verify=verify, client=pool)
        self._borrowed = pool is not None
        self._trace_headers = trace_headers
        """Send the current span's W3C `traceparent` header (the LLM clients: an LLM gateway that
        traces continues the turn's trace; MCP requests carry theirs in `_meta`)."""

    async def aclose(self) -> None:
        """Close the transport's own connections (not a borrowed pool's)."""
        if not self._borrowed:
            await super().aclose()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send `request` with aiohttp."""
        if self._trace_headers:
            inject_headers(request.headers)
        with _connection_failures(request):
            response = await super().handle_async_request(request)
        if isinstance(response.stream, httpx2.AsyncByteStream):
            # A GET may be a standing event stream; a POST's body ends with its answer.
            response.stream = _Body(response.stream, drain=request.method == "POST")
        return response
