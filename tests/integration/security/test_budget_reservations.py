"""Budgets under concurrency: spend is reserved before each LLM call, so turns in flight cannot overrun.

Before, a budget was checked against what its window held when the call started: 80 concurrent
turns under a 40-token hourly budget all passed the check before any was charged, and spent
1,440 tokens. Each call now reserves the most it can spend; a call finding the window's spend
and reservations at the limit waits for the calls in flight, and is refused once the spend
itself is. The overrun is at most one call's reservation (here: one call, 18 tokens).

A turn cancelled while its LLM call runs was never charged, though the provider was called:
it is now charged the call's estimated input.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastmcp import Client

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, FakeUsage, Hold, Text

LIMIT = 40
CALL = FakeUsage(10, 8)  # 18 tokens a call
TURNS = 80


async def test_80_concurrent_turns_overrun_a_small_budget_by_at_most_one_call() -> None:
    budgets = {"agent": {"window": "hour", "tokens": LIMIT}}
    # Each answer takes a while, so every turn is in flight before the first is charged.
    async with (
        FakeOpenAI(default=Text("fine", usage=CALL, interval=0.05)) as llm,
        serve_agent(agent_config(llm.base_url, budgets=budgets)) as agent,
        Client(agent.url, timeout=60) as client,
    ):
        results = await asyncio.gather(
            *(client.call_tool_mcp("send_message", {"message": f"hi {n}"}) for n in range(TURNS))
        )
    calls = len(llm.completions)
    spent = calls * (CALL.input + CALL.output)
    assert spent <= LIMIT + CALL.input + CALL.output, f"{calls} LLM calls spent {spent} of {LIMIT} tokens"
    refused = [r for r in results if r.is_error]
    assert len(refused) == TURNS - calls
    codes = {(r.structured_content or {})["error"]["code"] for r in refused}
    assert codes == {"BUDGET_EXCEEDED"}, codes


async def test_a_turn_cancelled_during_its_llm_call_is_charged() -> None:
    budgets = {"agent": {"window": "hour", "tokens": 100_000}}
    async with (
        FakeOpenAI() as llm,
        serve_agent(agent_config(llm.base_url, budgets=budgets)) as agent,
        Client(agent.url, timeout=60) as client,
    ):
        llm.script(Hold(asyncio.Event()))  # the model never answers
        call = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "a long one"}))
        await llm.held.wait()
        call.cancel()  # the client sends notifications/cancelled: the server cancels the turn
        await asyncio.gather(call, return_exceptions=True)
        health: dict[str, Any] = {}
        for _ in range(100):
            health = json.loads((await client.call_tool("get_health", {})).content[0].text)  # type: ignore[union-attr]
            if health.get("spend", {}).get("tokens"):
                break
            await asyncio.sleep(0.05)
    assert health.get("spend", {}).get("tokens", 0) > 0, health
