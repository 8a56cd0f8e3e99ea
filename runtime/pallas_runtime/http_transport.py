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

import contextlib
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx2
from httpx_aiohttp.httpx2 import AiohttpTransport as _Base


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
    def __init__(self, stream: httpx2.AsyncByteStream) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _connection_failures():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        with _connection_failures():
            await self._stream.aclose()


class AiohttpTransport(_Base):
    """httpx-aiohttp's transport, its connection failures named as such."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send `request` with aiohttp."""
        with _connection_failures(request):
            response = await super().handle_async_request(request)
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _Body(response.stream)
        return response
