"""A conversation longer than the model's context window keeps working, turn after turn.

Before, the whole stored history went into every request: once it outgrew the window the
provider answered HTTP 400 to every later turn, for good. The fake LLM here refuses, as a real
provider does, a request whose prompt and answer room exceed its window (counting a token per 4
bytes, about what tokenizers do with English); the agent is told the same window in its
capabilities and must fit each request into it.
"""

from __future__ import annotations

import json
from typing import Any

from fastmcp import Client

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, HttpError, Text

WINDOW = 3000
"""Tokens of the model's context window (the agent's `capabilities.contextWindow`)."""
ANSWER_ROOM = 500
TRIMMED = "pallas.dev/historyTrimmed"


def provider_with_a_window(body: dict[str, Any]) -> Any:
    prompt_tokens = len(json.dumps(body["messages"])) // 4
    if prompt_tokens + body.get("max_tokens", 0) > WINDOW:
        return HttpError(400, f"This model's maximum context length is {WINDOW} tokens")
    turn = sum(m["role"] == "user" for m in body["messages"])
    return Text(f"answer after {turn} user messages: " + "lorem ipsum " * 40)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def test_a_conversation_longer_than_the_window_keeps_working_and_is_stored_whole(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = provider_with_a_window
    config = agent_config(
        fake_openai.base_url,
        instruction="You answer briefly.",
        capabilities={"contextWindow": WINDOW, "maxOutputTokens": ANSWER_ROOM},
        requestParams={"maxTokens": ANSWER_ROOM},
    )
    sent = [f"message {n}: " + "the quick brown fox jumps over the lazy dog " * 40 for n in range(12)]
    metas = []
    async with serve_agent(config) as agent, Client(agent.url) as client:
        for text in sent:
            result = await client.call_tool_mcp(
                "send_message", {"message": text, "conversation_id": "long-talk"}
            )
            assert not result.is_error, result.content[0].text
            metas.append((result.meta or {}).get(TRIMMED))
        history = await client.get_prompt(f"{config.name}_history", {"conversation_id": "long-talk"})
    # Every request fitted: the fake never had to refuse one.
    assert len(fake_openai.completions) == len(sent)
    # The stored history is whole: every message and every answer, in order.
    stored = [m.content.text for m in history.messages]
    assert stored[0::2] == sent
    assert all(a.startswith("answer after ") for a in stored[1::2])
    # Early turns fit whole; later ones left out the oldest turns and said how many messages.
    assert metas[0] is None
    assert metas[-1] is not None
    for request, meta, n in zip(fake_openai.completions, metas, range(len(sent)), strict=True):
        users = user_texts(request.json)
        assert users[-1] == sent[n]  # the newest user message is always sent
        dropped = 0 if meta is None else meta["droppedMessages"]
        assert dropped % 2 == 0  # whole turns: a user message and its answer
        assert users == sent[dropped // 2 : n + 1]
