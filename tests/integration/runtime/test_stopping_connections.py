"""A stopping server ends each connection with its response, so no client reuses one it closes.

`pallas_io.serving.serve` drains before uvicorn stops listening. uvicorn then closes the
connections that are idle; a request a client sends on one of them right then is lost ("Server
disconnected without sending a response": the MCP client fails the call with "Connection
closed"). A two-node drain under traffic hit it: an agent's drain ended its sessions' standing
notification streams, whose heads had gone out with keep-alive long before, and a client sent
its next call over that connection as the process closed it. From the drain's start, every
response ends its connection, those in progress too. Raw HTTP/1.1 over loopback, so what the
server does with each connection is seen as it happens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from pallas_io.serving import bound_port, listen, serve
from tests.integration.security.raw_http import LOOPBACK, head

DRAIN_SECONDS = 3.0
"""How long the test server's drain lasts; every connection must be closed well within it."""
WITHIN = 1.0


def stream_and_plain(ended: asyncio.Event) -> Starlette:
    """`/stream`: an event stream that lasts until `ended`; `/plain`: a short answer."""

    async def events() -> AsyncIterator[bytes]:
        yield b"data: hello\n\n"
        await ended.wait()
        yield b"data: bye\n\n"

    async def stream(_: Request) -> Response:
        return StreamingResponse(events(), media_type="text/event-stream")

    async def plain(_: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/stream", stream), Route("/plain", plain)])


@contextlib.asynccontextmanager
async def stoppable_server() -> AsyncIterator[tuple[int, Callable[[], None], asyncio.Event]]:
    """A served app whose drain ends its streams, then lasts `DRAIN_SECONDS`; (port, stop, drained)."""
    ended, drained = asyncio.Event(), asyncio.Event()

    async def drain() -> None:
        ended.set()  # as an agent's drain closes its sessions' standing streams
        await asyncio.sleep(DRAIN_SECONDS)
        drained.set()

    started = asyncio.Event()
    with listen(LOOPBACK, 0) as sock:
        task = asyncio.create_task(serve(stream_and_plain(ended), sock, started=started, drain=drain))
        await asyncio.wait_for(started.wait(), 10)
        try:
            yield bound_port(sock), task.cancel, drained
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def response_head(reader: asyncio.StreamReader) -> str:
    return (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WITHIN)).decode().lower()


async def until_closed(reader: asyncio.StreamReader, drained: asyncio.Event) -> bytes:
    """What the server still sends before it closes the connection (while the drain still runs)."""
    rest = await asyncio.wait_for(reader.read(), WITHIN)
    assert not drained.is_set(), "the connection stayed open until the drain was over"
    return rest


async def test_a_response_in_progress_when_the_drain_begins_ends_its_connection() -> None:
    async with stoppable_server() as (port, stop, drained):
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            writer.write(head("/stream"))
            opened = await response_head(reader)
            assert "connection: close" not in opened  # a kept-alive connection, as any stream's
            await asyncio.wait_for(reader.readuntil(b"hello\n\n\r\n"), WITHIN)
            stop()
            rest = await until_closed(reader, drained)
        finally:
            writer.close()

    assert rest.endswith(b"data: bye\n\n\r\n0\r\n\r\n"), rest  # the stream ended whole, then the connection


async def test_requests_on_a_kept_alive_or_new_connection_in_the_drain_are_the_connections_last() -> None:
    async with stoppable_server() as (port, stop, drained):
        kept_reader, kept_writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            kept_writer.write(head("/plain"))
            assert "connection: close" not in await response_head(kept_reader)
            assert await asyncio.wait_for(kept_reader.readexactly(2), WITHIN) == b"ok"
            stop()
            await asyncio.sleep(0.2)  # the drain has begun; the server still listens
            answers = []
            new_reader, new_writer = await asyncio.open_connection(LOOPBACK, port)
            try:
                for reader, writer in ((kept_reader, kept_writer), (new_reader, new_writer)):
                    writer.write(head("/plain"))
                    answers.append((await response_head(reader), await until_closed(reader, drained)))
            finally:
                new_writer.close()
        finally:
            kept_writer.close()

    for answered, body in answers:
        assert answered.startswith("http/1.1 200"), answered
        assert "connection: close" in answered, answered
        assert body == b"ok"
