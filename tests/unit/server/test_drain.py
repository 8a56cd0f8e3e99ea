"""A stopping agent drains: turns in flight finish, those its drain outlasts are kept as failed.

Driven in memory (`fastmcp.Client(server.mcp)`) with a provider whose completions wait for the
test: the drain's waiting runs on looptime's loop clock, so "120 s" passes at once and exactly.
What needs HTTP (the 503 for new sessions, `/readyz`, signals) is tests/integration/runtime.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pallas_api.errors import ErrorCode
from pallas_runtime.conversations.caller import ANONYMOUS
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.conversations.scope import DEFAULT_ID
from pallas_runtime.llm.anthropic_messages import messages_blocks
from pallas_runtime.llm.openai_chat import chat_messages
from pallas_runtime.messages import Completion, TurnFailure, UserMessage
from pallas_runtime.server import AgentServer
from tests.unit.agent.doubles import ScriptedProvider
from tests.unit.server.test_surface import error_of, in_memory

SHUTTING_DOWN = ErrorCode.AGENT_SHUTTING_DOWN.value


def held(script: list[Completion]) -> ScriptedProvider:
    """Completions that wait until `release` is set (then answer from the script)."""
    return ScriptedProvider(list(script), release=asyncio.Event())


def release(provider: ScriptedProvider) -> None:
    assert provider.release is not None
    provider.release.set()


def history_lines(result: Any) -> list[tuple[str, str]]:
    return [(str(m.role), m.content.text) for m in result.messages]


@pytest.mark.looptime
async def test_a_drain_lets_the_running_turn_finish_and_keeps_it() -> None:
    provider = held([Completion("It was Plato.")])
    async with in_memory(provider=provider, conversations={"scope": "caller"}, drainSeconds=120) as agent:
        running = asyncio.create_task(agent.client.call_tool_mcp("send_message", {"message": "Who?"}))
        await provider.started.wait()
        draining = asyncio.create_task(agent.server.drain())
        await asyncio.sleep(30)  # looptime: well inside the drain, the turn still running
        assert agent.server.draining
        assert not draining.done()
        release(provider)
        answered = await running
        outcome = await draining
        history = await agent.client.get_prompt("harper_history", {})
    assert (answered.is_error, answered.content[0].text) == (False, "It was Plato.")
    assert (outcome.finished, outcome.interrupted) == (1, 0)
    assert 30 <= outcome.seconds < 31
    assert history_lines(history) == [("user", "Who?"), ("assistant", "It was Plato.")]


@pytest.mark.looptime
async def test_a_turn_the_drain_outlasts_is_interrupted_and_kept_as_failed_with_a_retryable_code() -> None:
    provider = held([])
    async with in_memory(provider=provider, conversations={"scope": "caller"}, drainSeconds=20) as agent:
        running = asyncio.create_task(agent.client.call_tool_mcp("send_message", {"message": "Long one"}))
        await provider.started.wait()
        outcome = await agent.server.drain()
        ended = await running
        later = await agent.client.call_tool_mcp("send_message", {"message": "And now?"})
        history = await agent.client.get_prompt("harper_history", {})
        listed = json.loads((await agent.client.call_tool_mcp("list_conversations", {})).content[0].text)
        stored = await agent.server._store.history(_default_key(agent.server))
    assert (outcome.finished, outcome.interrupted) == (0, 1)
    assert 20 <= outcome.seconds < 21
    assert error_of(ended) == (
        SHUTTING_DOWN,
        "agent harper stopped before it finished this turn (its drain of 20s ran out); "
        "the message is kept in the conversation as a failed turn: send it again",
    )
    assert ended.structured_content["error"]["retryable"] is True
    assert "processed" not in ended.structured_content["error"], "part of it ran: a client must not resend it"
    assert error_of(later) == (
        SHUTTING_DOWN,
        "agent harper is shutting down; the message was not processed: send it again",
    )
    assert later.structured_content["error"]["processed"] is False  # none of it ran: safe to resend
    assert stored == [
        UserMessage(stored[0].content),
        TurnFailure(SHUTTING_DOWN, "the agent stopped before this turn finished (its drain of 20s ran out)"),
    ]
    assert history_lines(history) == [
        ("user", "Long one"),
        (
            "assistant",
            f"[turn failed] {SHUTTING_DOWN}: the agent stopped before this turn finished "
            "(its drain of 20s ran out)",
        ),
    ]
    assert [c["messageCount"] for c in listed["conversations"]] == [2]


@pytest.mark.looptime
async def test_the_next_turn_sends_the_model_the_question_left_unanswered_but_not_the_failure() -> None:
    provider = held([Completion("Both: Plato wrote it.")])
    async with in_memory(provider=provider, conversations={"scope": "caller"}, drainSeconds=0) as agent:
        running = asyncio.create_task(agent.client.call_tool_mcp("send_message", {"message": "Who?"}))
        await provider.started.wait()
        await agent.server.drain()
        await running
        # The same conversation served by the agent's next process (here: the store it shares).
        agent.server.inflight.stopping = agent.server.inflight.draining = False
        release(provider)
        answered = await agent.client.call_tool_mcp("send_message", {"message": "Who wrote it?"})
    assert not answered.is_error
    sent = provider.calls[-1][1]
    assert [type(m).__name__ for m in sent] == ["UserMessage", "TurnFailure", "UserMessage"]
    assert chat_messages("", sent) == [
        {"role": "user", "content": "Who?"},
        {"role": "user", "content": "Who wrote it?"},
    ]
    assert messages_blocks(sent) == [  # one user turn: the API wants them to alternate
        {
            "role": "user",
            "content": [{"type": "text", "text": "Who?"}, {"type": "text", "text": "Who wrote it?"}],
        }
    ]


@pytest.mark.looptime
async def test_a_hurried_drain_interrupts_at_once() -> None:
    provider = held([])
    async with in_memory(provider=provider, conversations={"scope": "caller"}, drainSeconds=600) as agent:
        running = asyncio.create_task(agent.client.call_tool_mcp("send_message", {"message": "Long one"}))
        await provider.started.wait()
        draining = asyncio.create_task(agent.server.drain())
        await asyncio.sleep(1)
        agent.server.hurry()
        outcome = await draining
        ended = await running
    assert outcome.interrupted == 1
    assert outcome.seconds < 2
    assert error_of(ended)[1].startswith(
        "agent harper stopped before it finished this turn (it was told to stop at once)"
    )


@pytest.mark.looptime
async def test_an_interrupted_turn_that_keeps_no_conversation_says_nothing_was_kept() -> None:
    provider = held([])
    async with in_memory(provider=provider, conversations={"scope": "request"}, drainSeconds=5) as agent:
        running = asyncio.create_task(agent.client.call_tool_mcp("send_message", {"message": "Hi"}))
        await provider.started.wait()
        await agent.server.drain()
        ended = await running
    assert error_of(ended) == (
        SHUTTING_DOWN,
        "agent harper stopped before it finished this turn (its drain of 5s ran out); nothing was kept: "
        "send it again",
    )


@pytest.mark.looptime
async def test_an_idle_agent_drains_at_once() -> None:
    async with in_memory(drainSeconds=120) as agent:
        outcome = await agent.server.drain()
    assert (outcome.finished, outcome.interrupted, outcome.seconds) == (0, 0, 0)


def _default_key(server: AgentServer) -> ConversationKey:
    """The one default conversation of the anonymous caller (`caller` scope without auth)."""
    return ConversationKey(server.config.identity, ANONYMOUS, DEFAULT_ID)
