"""Stateful downstream servers: a session per caller conversation, bounded, closed when done.

The downstream server keeps a counter per MCP session (`session_counter_mcp`); the agent thinks
with the scripted fake OpenAI server and calls `counter__count` once per turn. What a turn's
call returned is read from the next LLM request (the tool message the model is shown).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastmcp import Client

from tests.integration.runtime.test_agent_server import agent, client, config, last_tool_text
from tests.support.conversations import until
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, session_counter_server


def counter(url: str, *, stateful: bool = True, **sessions: int) -> dict[str, Any]:
    return {"name": "counter", "url": url, "stateful": stateful, "sessions": sessions}


def counting_turns(llm: FakeOpenAI, turns: int) -> None:
    """Script `turns` turns, each calling `counter__count` once and then answering."""
    steps = (ToolCalls([Call("counter__count", {})]), Text("ok"))
    llm.script(*[step for _ in range(turns) for step in steps])


def counts(llm: FakeOpenAI) -> list[int]:
    """What each turn's `count` call returned, in order."""
    return [json.loads(text)["count"] for r in llm.completions if (text := last_tool_text(r.json))]


async def turn(mcp: Client, **arguments: Any) -> None:
    result = await mcp.call_tool("send_message", {"message": "count", **arguments})
    assert result.content[0].text == "ok"


def deletes(server: RunningServer) -> int:
    return len(server.received("DELETE"))


async def test_two_callers_never_see_each_others_state(fake_openai: FakeOpenAI) -> None:
    counting_turns(fake_openai, 4)
    async with (
        session_counter_server() as srv,
        agent(config(fake_openai, servers=[counter(srv.url)])) as running,
        client(running.url) as alice,
        client(running.url) as bob,
    ):
        await turn(alice)
        await turn(bob)
        await turn(alice)
        await turn(bob)
    assert counts(fake_openai) == [1, 1, 2, 2]


async def test_without_stateful_the_callers_share_one_session(fake_openai: FakeOpenAI) -> None:
    """The test above can fail: this is what it would see without `stateful`."""
    counting_turns(fake_openai, 4)
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url, stateful=False)])
        async with agent(cfg) as running, client(running.url) as alice, client(running.url) as bob:
            for mcp in (alice, bob, alice, bob):
                await turn(mcp)
    assert counts(fake_openai) == [1, 2, 3, 4]


async def test_one_callers_two_conversations_are_apart(fake_openai: FakeOpenAI) -> None:
    counting_turns(fake_openai, 3)
    async with (
        session_counter_server() as srv,
        agent(config(fake_openai, servers=[counter(srv.url)])) as running,
        client(running.url) as mcp,
    ):
        await turn(mcp, conversation_id="a")
        await turn(mcp, conversation_id="b")
        await turn(mcp, conversation_id="a")
    assert counts(fake_openai) == [1, 1, 2]


async def test_the_session_unused_longest_makes_room(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    counting_turns(fake_openai, 4)
    caplog.set_level(logging.INFO, "pallas.downstream")
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url, maxSessions=2)])
        async with agent(cfg) as running, client(running.url) as mcp:
            for conversation in ("a", "b", "c", "a"):
                await turn(mcp, conversation_id=conversation)
            await until(lambda: deletes(srv) >= 2, "the sessions of a and then b closed")
    # a was closed to make room for c, so a starts again from nothing; then b made room for a.
    assert counts(fake_openai) == [1, 1, 1, 1]
    closed = [r.getMessage() for r in caplog.records if "closed (to make room" in r.getMessage()]
    assert len(closed) == 2
    assert "sessions.maxSessions is 2" in closed[0]
    connected = [r.getMessage() for r in caplog.records if r.getMessage().endswith(": connected")]
    assert len([line for line in connected if line.startswith("counter session c-")]) == 4
    assert "counter: connected" in connected  # the shared session the tools are listed on


async def test_an_idle_session_is_closed_and_the_next_call_starts_afresh(fake_openai: FakeOpenAI) -> None:
    counting_turns(fake_openai, 2)
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url, idleTimeoutSeconds=1)])
        async with agent(cfg) as running, client(running.url) as mcp:
            await turn(mcp, conversation_id="a")
            await until(lambda: deletes(srv) == 1, "the idle session closed", within=30)
            await turn(mcp, conversation_id="a")
    assert counts(fake_openai) == [1, 1]


async def test_deleting_a_conversation_closes_its_session(fake_openai: FakeOpenAI) -> None:
    counting_turns(fake_openai, 1)
    async with (
        session_counter_server() as srv,
        agent(config(fake_openai, servers=[counter(srv.url)])) as running,
        client(running.url) as mcp,
    ):
        await turn(mcp, conversation_id="a")
        assert deletes(srv) == 0
        await mcp.call_tool("delete_conversation", {"conversation_id": "a"})
        await until(lambda: deletes(srv) == 1, "the conversation's session closed")


async def test_a_turn_that_keeps_no_conversation_closes_its_session(fake_openai: FakeOpenAI) -> None:
    counting_turns(fake_openai, 2)
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url)], conversations={"scope": "request"})
        async with agent(cfg) as running, client(running.url) as mcp:
            await turn(mcp)
            await until(lambda: deletes(srv) == 1, "the one turn's session closed")
            await turn(mcp)
    assert counts(fake_openai) == [1, 1]


async def test_a_conversation_keeps_its_session_while_its_callers_token_is_renewed(
    fake_openai: FakeOpenAI,
) -> None:
    counting_turns(fake_openai, 2)
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url) | {"forwardInboundAuth": True}])
        async with agent(cfg) as running:
            async with client(running.url, bearer="Bearer token-1") as mcp:
                await turn(mcp, conversation_id="a")
            async with client(running.url, bearer="Bearer token-2") as mcp:
                await turn(mcp, conversation_id="a")
    seen = [json.loads(text) for r in fake_openai.completions if (text := last_tool_text(r.json))]
    # Each turn scrubs its own caller's bearer from what the server echoes, and only that one:
    # `[redacted]` says the server got the turn's current token (a stale one would show).
    assert seen == [
        {"count": 1, "authorization": "[redacted]"},
        {"count": 2, "authorization": "[redacted]"},
    ]


async def test_a_gateway_clients_session_is_its_conversation(fake_openai: FakeOpenAI) -> None:
    async with session_counter_server() as srv:
        cfg = config(fake_openai, servers=[counter(srv.url)], toolExposure={"gateway": True})
        async with agent(cfg) as running:
            seen = []
            for _ in range(2):
                async with client(running.url) as mcp:
                    for _ in range(2):
                        result = await mcp.call_tool("execute_tool", {"server": "counter", "tool": "count"})
                        seen.append(json.loads(result.content[0].text)["count"])
    assert seen == [1, 2, 1, 2]
