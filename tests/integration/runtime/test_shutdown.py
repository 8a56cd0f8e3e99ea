"""Stopping an agent drains it: turns in flight finish, new sessions are refused, nothing is lost.

`pallas agent` runs as a process with a SQLite store and its LLM is a fake that holds each
request until the test releases it (a turn as long as the test wants). The process gets SIGTERM
while a turn runs; what is kept is read back through the agent's next process on the same file,
as a replacement pod on a shared database would read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.config import AgentConfig
from pallas_api.errors import DRAINING_RPC_CODE
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Hold, Text

SHUTTING_DOWN = "AGENT_SHUTTING_DOWN"


def draining_agent(llm: FakeOpenAI, db: Path, drain: int) -> AgentConfig:
    return agent_config(
        llm.base_url,
        name="draining",
        drainSeconds=drain,
        conversations={"type": "sqlite", "sqlitePath": str(db)},
    )


def session(url: str) -> Client[Any]:
    return Client(StreamableHttpTransport(url), mode="legacy", timeout=60)


async def send(client: Client[Any], message: str, conversation_id: str) -> Any:
    arguments = {"message": message, "conversation_id": conversation_id}
    return await client.call_tool_mcp("send_message", arguments)


async def readiness(base_url: str, wanted: int) -> dict[str, Any]:
    """`/readyz`'s body once it answers `wanted` (polled, as kubelet does; not listening yet is
    not an answer)."""
    async with httpx2.AsyncClient(timeout=2) as http:
        for _ in range(1000):
            with contextlib.suppress(httpx2.TransportError):
                response = await http.get(f"{base_url}/readyz")
                if response.status_code == wanted:
                    return dict(response.json())
            await asyncio.sleep(0.02)
    raise AssertionError(f"/readyz never answered {wanted}")


async def initialize(url: str) -> httpx2.Response:
    """A new client's first request: MCP `initialize` without a session."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx2.AsyncClient(timeout=5) as http:
        return await http.post(url, json=body, headers=headers)


async def history(config: AgentConfig, conversation_id: str) -> list[tuple[str, str]]:
    """The conversation as the agent's next process shows it (`<agent>_history`)."""
    async with run_agent_process(config) as again, session(again.url) as client:
        prompt = await client.get_prompt("draining_history", {"conversation_id": conversation_id})
    return [(str(m.role), m.content.text) for m in prompt.messages]


async def exited(pid: int, since: float) -> float:
    """Seconds from `since` until the process ended (a zombie waiting to be reaped counts)."""
    for _ in range(1200):
        try:
            stat = await asyncio.to_thread(Path(f"/proc/{pid}/stat").read_text)
        except FileNotFoundError:
            break
        if stat.split(") ", 1)[1].startswith("Z"):
            break
        await asyncio.sleep(0.05)
    return time.monotonic() - since


async def test_sigterm_lets_turns_in_flight_finish_refuses_new_sessions_and_keeps_everything(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.default = Hold(release, then=Text("It was Plato."))
    config = draining_agent(fake_openai, tmp_path / "conversations.db", drain=60)
    async with run_agent_process(config, stop_grace=90) as proc:
        async with session(proc.url) as first, session(proc.url) as second:
            turn = asyncio.create_task(send(first, "Who wrote The Republic?", "c-1"))
            await fake_openai.holding_at_least(1)
            stopped_at = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)

            # Not ready any more: kubelet takes the pod out of its Service's endpoints.
            assert await readiness(proc.base_url, 503) == {"status": "draining"}
            # A new client is refused with a retryable error, and its connection closed.
            refused = await initialize(proc.url)
            # A client mid-conversation on its open session is still served.
            mid = asyncio.create_task(send(second, "And The Laws?", "c-2"))
            await fake_openai.holding_at_least(2)
            release.set()
            answers = await asyncio.wait_for(asyncio.gather(turn, mid), 30)
        exited_in = await exited(proc.pid, stopped_at)
        records = [json.loads(line) for line in proc.stderr().splitlines()]

    assert [(a.is_error, a.content[0].text) for a in answers] == [(False, "It was Plato.")] * 2
    assert refused.status_code == 503
    assert (refused.headers["retry-after"], refused.headers["connection"]) == ("1", "close")
    error = refused.json()["error"]
    assert error["code"] == DRAINING_RPC_CODE
    assert error["data"] == {"code": SHUTTING_DOWN, "retryable": True, "retryAfterSeconds": 1}
    assert error["message"].startswith("agent draining is shutting down and takes no new sessions")
    assert exited_in < 10, f"the process took {exited_in:.1f}s to exit once its turns were done"
    drained = [r["message"] for r in records if r["message"].startswith("drained in")]
    assert len(drained) == 1
    assert drained[0].endswith(
        "2 call(s) finished, 0 interrupted (kept as failed turns: AGENT_SHUTTING_DOWN)"
    )
    assert not [r for r in records if r["level"] == "ERROR"], "a draining agent is not an error"
    assert await history(config, "c-1") == [
        ("user", "Who wrote The Republic?"),
        ("assistant", "It was Plato."),
    ]


async def test_a_turn_longer_than_the_drain_is_interrupted_kept_as_failed_and_answered_retryably(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Hold(asyncio.Event())  # never answers
    config = draining_agent(fake_openai, tmp_path / "conversations.db", drain=1)
    async with run_agent_process(config, stop_grace=30) as proc:
        async with session(proc.url) as client:
            turn = asyncio.create_task(send(client, "A very long question", "c-1"))
            await fake_openai.holding_at_least(1)
            stopped_at = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            result = await asyncio.wait_for(turn, 20)
            answered_in = time.monotonic() - stopped_at
        exited_in = await exited(proc.pid, stopped_at)
        records = [json.loads(line) for line in proc.stderr().splitlines()]

    assert result.is_error
    assert result.structured_content["error"]["code"] == SHUTTING_DOWN
    assert result.structured_content["error"]["retryable"] is True
    assert result.content[0].text == (
        "agent draining stopped before it finished this turn (its drain of 1s ran out); "
        "the message is kept in the conversation as a failed turn: send it again"
    )
    assert 1 <= answered_in < 5, f"answered {answered_in:.1f}s after SIGTERM (drain: 1s)"
    assert exited_in < 10
    assert fake_openai.abandoned == 1, "the interrupted turn's LLM request was not stopped"
    assert [r["level"] for r in records if r["message"].startswith("drained in")] == ["WARNING"]
    assert not [r for r in records if r["level"] == "ERROR"]
    assert await history(config, "c-1") == [
        ("user", "A very long question"),
        (
            "assistant",
            f"[turn failed] {SHUTTING_DOWN}: "
            "the agent stopped before this turn finished (its drain of 1s ran out)",
        ),
    ]


async def test_an_idle_agent_stops_at_once(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = draining_agent(fake_openai, tmp_path / "conversations.db", drain=600)
    # An open session (and its standing stream) does not keep it waiting.
    async with run_agent_process(config) as proc, session(proc.url) as client:
        await client.call_tool("get_health", {})
        stopped_at = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        exited_in = await exited(proc.pid, stopped_at)
    assert exited_in < 3, f"an idle agent took {exited_in:.1f}s to stop"
