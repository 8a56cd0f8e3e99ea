"""`pallas chat` survives its agent going away: it reconnects by itself and the conversation goes on.

The agent is a `pallas agent` process on a fixed port with a SQLite store (what a replacement pod
on a shared database sees); the test stops it and starts its successor on the same port, as a
rollout does behind a Service. `pallas chat` runs as the installed program.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from pallas_api.config import AgentConfig
from tests.integration.runtime.test_shutdown import exited, history
from tests.support.agents import QUIET_FASTMCP_ENV, agent_config, pallas_argv, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.mcp_peers import free_ports


def chat_agent(llm: FakeOpenAI, db: Path, drain: int = 60) -> AgentConfig:
    return agent_config(
        llm.base_url,
        name="draining",  # `history()` reads the `draining_history` prompt
        drainSeconds=drain,
        conversations={"type": "sqlite", "sqlitePath": str(db)},
    )


def user_texts(request: dict[str, object]) -> list[str]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "user"]


@dataclass
class Chat:
    """A `pallas chat` process and what it has written so far."""

    proc: asyncio.subprocess.Process
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def line(self, stream: str, start: str, limit: float = 60) -> str:
        lines = self.out if stream == "out" else self.err
        async with asyncio.timeout(limit):
            while True:
                found = next((line for line in lines if line.startswith(start)), None)
                if found is not None:
                    return found
                self.changed.clear()
                await self.changed.wait()

    async def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{text}\n".encode())
        await self.proc.stdin.drain()


async def _collect(stream: asyncio.StreamReader, into: list[str], changed: asyncio.Event) -> None:
    async for raw in stream:
        into.append(raw.decode().rstrip("\n"))
        changed.set()


@contextlib.asynccontextmanager
async def pallas_chat(*args: str) -> AsyncIterator[Chat]:
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(), "chat", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **QUIET_FASTMCP_ENV},
    )  # fmt: skip
    chat = Chat(proc)
    assert proc.stdout is not None
    assert proc.stderr is not None
    readers = [
        asyncio.create_task(_collect(proc.stdout, chat.out, chat.changed)),
        asyncio.create_task(_collect(proc.stderr, chat.err, chat.changed)),
    ]
    try:
        yield chat
    finally:
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()  # end of input: the REPL ends
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        await asyncio.gather(*readers)


@contextlib.asynccontextmanager
async def agents(config: AgentConfig, port: int) -> AsyncIterator[Agents]:
    slot = Agents(config, port)
    try:
        await slot.start()
        yield slot
    finally:
        await slot.current.aclose()


@dataclass
class Agents:
    """The agent on one port, one process after another (a Service's view of a rollout)."""

    config: AgentConfig
    port: int
    current: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    pid: int = 0

    async def start(self) -> None:
        self.current = contextlib.AsyncExitStack()
        proc = await self.current.enter_async_context(run_agent_process(self.config, port=self.port))
        self.pid = proc.pid

    async def replace(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop this process with `sig` (SIGTERM drains it), wait until it is gone, start the next."""
        os.killpg(self.pid, sig)
        await exited(self.pid, 0)
        await self.current.aclose()
        await self.start()


async def test_the_repl_goes_on_with_the_successor_of_its_agent_on_the_same_session(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = lambda request: Text(f"answer to {user_texts(request)[-1]}")
    port = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"
    async with agents(chat_agent(fake_openai, tmp_path / "c.db"), port) as agent, pallas_chat(url) as chat:
        await chat.say("Who wrote The Republic?")
        assert await chat.line("out", "answer to") == "answer to Who wrote The Republic?"
        await agent.replace()  # a rollout between two messages: the session's process is gone
        await chat.say("And who was his teacher?")
        answer = await chat.line("out", "answer to And")
    assert answer == "answer to And who was his teacher?"
    # The successor took the session on (docs/runtime.md): the message ran once, at once, with
    # no reconnect and nothing sent again. Before, it met a session the successor did not
    # have (404) and the REPL reconnected and sent it again.
    assert [line for line in chat.err if "reconnected" in line or "sending it again" in line] == []
    # The successor saw the first turn: the conversation went on, not a new one.
    assert user_texts(fake_openai.completions[-1].json) == [
        "Who wrote The Republic?",
        "And who was his teacher?",
    ]
    assert len(fake_openai.completions) == 2


async def test_a_turn_the_drain_cut_short_is_sent_again_to_the_successor(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(Hold(asyncio.Event()))  # the first turn outlasts its agent's drain
    fake_openai.default = Text("Plato.")
    config = chat_agent(fake_openai, tmp_path / "c.db", drain=1)
    port = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"
    chat_args = ("-m", "Who wrote it?", "--conversation-id", "c-1", url)
    async with agents(config, port) as agent, pallas_chat(*chat_args) as chat:
        await fake_openai.holding_at_least(1)
        await agent.replace()
        assert await asyncio.wait_for(chat.proc.wait(), 60) == 0
    assert chat.out == ["Plato."]
    assert "pallas chat: the agent did not answer that message; sending it again" in chat.err
    assert any(line.startswith("pallas chat: reconnected to ") for line in chat.err)
    # The cut turn is kept as failed, and the model was not shown the failure.
    assert user_texts(fake_openai.completions[-1].json) == ["Who wrote it?", "Who wrote it?"]
    assert await history(config, "c-1") == [
        ("user", "Who wrote it?"),
        (
            "assistant",
            "[turn failed] AGENT_SHUTTING_DOWN: the agent stopped before this turn finished "
            "(its drain of 1s ran out)",
        ),
        ("user", "Who wrote it?"),
        ("assistant", "Plato."),
    ]


async def test_a_message_whose_agent_died_mid_turn_is_sent_again_when_nothing_was_kept(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(Hold(asyncio.Event()))  # the first turn never ends: its process is killed
    fake_openai.default = Text("Plato.")
    config = chat_agent(fake_openai, tmp_path / "c.db")
    port = free_ports(1)
    url = f"http://127.0.0.1:{port}/mcp"
    chat_args = ("-m", "Who wrote it?", "--conversation-id", "c-1", url)
    async with agents(config, port) as agent, pallas_chat(*chat_args) as chat:
        await fake_openai.holding_at_least(1)
        await agent.replace(signal.SIGKILL)  # a crash: no drain, the connection drops
        assert await asyncio.wait_for(chat.proc.wait(), 60) == 0
    assert chat.out == ["Plato."]
    # The outcome was unknown: the history, read after reconnecting, held no answer to it.
    assert "pallas chat: the agent did not answer that message; sending it again" in chat.err
    assert await history(config, "c-1") == [("user", "Who wrote it?"), ("assistant", "Plato.")]
