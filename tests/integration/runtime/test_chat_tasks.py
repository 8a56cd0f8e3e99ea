"""`pallas chat` follows a turn the agent keeps running as a task when its connection drops.

`pallas chat` marks each message resumable (`pallas.dev/resumable`): the agent runs the turn as a
task, streams its progress on the request while the connection lasts, and names the task first.
A TCP proxy between the chat session and the agent cuts every connection mid-turn, twice; the
chat follows the task with `tasks/get` on new connections and prints the one answer, without
sending the message again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from pallas_runtime.commands.chat.session import open_session
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text

LOOPBACK = "127.0.0.1"


class CuttingProxy:
    """Forwards TCP to `port`; `cut()` drops every connection open now (new ones still pass)."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._open: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self._port)
        self._open |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._open -= {writer, up_writer}

    def cut(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CuttingProxy]:
        server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self
            self.cut()


async def test_a_dropped_connection_follows_the_task_and_never_sends_the_message_again(
    fake_openai: FakeOpenAI,
) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, Text("worth the wait")))
    async with (
        serve_agent(agent_config(fake_openai.base_url)) as served,
        CuttingProxy(served.port).running() as proxy,
        open_session(f"http://{LOOPBACK}:{proxy.port}/mcp", {}, 30.0, None) as chat,
    ):
        sending = asyncio.create_task(chat.send("a long one"))
        await fake_openai.holding_at_least(1)
        await asyncio.sleep(0.2)  # the task's name has reached the chat
        proxy.cut()  # the turn's own request is gone
        await asyncio.sleep(0.3)
        proxy.cut()  # and the connection polling the task
        await asyncio.sleep(0.3)
        release.set()
        turn = await asyncio.wait_for(sending, 30)
    assert turn.text == "worth the wait"
    assert not turn.failed
    assert len(fake_openai.completions) == 1  # sent once, answered once
