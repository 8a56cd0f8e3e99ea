"""The agents' aiohttp transport names connection failures for what they are (not timeouts)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest

from pallas_runtime.http_transport import AiohttpTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_server(handle: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.close()


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(5)


def cut_body(streaming: asyncio.Event) -> Handler:
    """Start a chunked answer, then cut the connection once the client says it is streaming it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + b"5\r\nhello\r\n")
        await writer.drain()
        try:
            await asyncio.wait_for(streaming.wait(), 10)
        finally:
            writer.transport.abort()

    return handle


async def read_all(response: httpx2.Response, streaming: asyncio.Event) -> None:
    async for _ in response.aiter_bytes():
        streaming.set()  # the first chunk is here: now the server may cut the connection


async def test_a_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    async with httpx2.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx2.ConnectError) as caught:
            await client.get(f"http://127.0.0.1:{closed_port()}/")
    assert not isinstance(caught.value, httpx2.TimeoutException)


async def test_a_server_hanging_up_is_a_read_error() -> None:
    async with raw_server(hang_up) as url, httpx2.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx2.ReadError):
            await client.get(url)


async def test_a_connection_cut_while_streaming_is_a_network_error() -> None:
    streaming = asyncio.Event()
    async with (
        raw_server(cut_body(streaming)) as url,
        httpx2.AsyncClient(transport=AiohttpTransport()) as client,
        client.stream("GET", url) as response,
    ):
        with pytest.raises(httpx2.NetworkError) as caught:
            await read_all(response, streaming)
    assert not isinstance(caught.value, httpx2.TimeoutException)


async def test_a_real_timeout_stays_a_timeout() -> None:
    timeout = httpx2.Timeout(5, read=0.2)
    async with raw_server(never_answer) as url, httpx2.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(url, timeout=timeout)
