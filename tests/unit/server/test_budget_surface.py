"""Budgets at an agent's MCP surface: BUDGET_EXCEEDED, the spend in `_meta` and `get_health`."""

from __future__ import annotations

import json

from pallas_api.spending import SPEND_META
from pallas_runtime.spending.chain import BUDGET_META
from tests.unit.agent.doubles import calls, text
from tests.unit.server.test_surface import error_of, in_memory

PER_CALLER = {"perCaller": {"window": "day", "tokens": 40}}


async def test_a_spent_budget_ends_the_turn_with_budget_exceeded_before_the_next_llm_call() -> None:
    # calls(): 12 tokens; text(): 28 tokens. 12 + 28 = 40: the second turn is refused at once.
    async with in_memory([calls("nothing__here"), text("one"), text("never")], budgets=PER_CALLER) as agent:
        first = await agent.client.call_tool_mcp("send_message", {"message": "hi"})
        second = await agent.client.call_tool_mcp("send_message", {"message": "again"})
    assert not first.is_error
    code, message = error_of(second)
    assert code == "BUDGET_EXCEEDED"
    assert message.startswith(
        "budget exceeded: caller anonymous spent 40 tokens of its 40 per day; it resets at "
    )
    assert len(agent.provider.calls) == 2  # the third completion was never asked for
    assert agent.metrics.budget_exceeded_total.labels("harper", "caller")._value.get() == 1


async def test_a_turn_stops_mid_way_when_its_chain_budget_runs_out_and_reports_its_spend() -> None:
    meta = {BUDGET_META: {"rootCaller": "sub:root", "tokens": 10}}
    async with in_memory([calls("nothing__here"), text("never")]) as agent:
        result = await agent.client.call_tool_mcp("send_message", {"message": "hi"}, meta=meta)
        plain = await agent.client.call_tool_mcp("send_message", {"message": "hi"})
    code, message = error_of(result)
    assert code == "BUDGET_EXCEEDED"
    assert "the root caller sub:root had 10 tokens left and this turn spent 12" in message
    assert result.meta[SPEND_META] == {"tokens": 12, "cost": 0.0}  # for the calling agent
    assert len(agent.provider.calls) == 2  # one for the refused turn (before its 2nd), one for `plain`
    assert not plain.is_error  # without a chain budget nothing limits this agent
    assert SPEND_META not in (plain.meta or {})  # and nobody asked what it spent


async def test_a_malformed_chain_budget_is_invalid_arguments() -> None:
    async with in_memory([text("never")]) as agent:
        result = await agent.client.call_tool_mcp(
            "send_message", {"message": "hi"}, meta={BUDGET_META: {"rootCaller": "", "tokens": 5}}
        )
    assert error_of(result)[0] == "INVALID_ARGUMENTS"
    assert agent.provider.calls == []


async def test_get_health_shows_the_agent_spend_and_warns_then_degrades() -> None:
    budgets = {"agent": {"window": "month", "tokens": 50}, "warnAt": 0.5}
    model = {"price": {"input": 1000, "output": 1000}}
    async with in_memory([text("one"), text("two")], budgets=budgets, capabilities=model) as agent:
        fresh = json.loads((await agent.client.call_tool("get_health", {})).content[0].text)
        await agent.client.call_tool_mcp("send_message", {"message": "hi"})
        warned = json.loads((await agent.client.call_tool("get_health", {})).content[0].text)
        await agent.client.call_tool_mcp("send_message", {"message": "hi"})
        spent = json.loads((await agent.client.call_tool("get_health", {})).content[0].text)
    assert fresh["spend"]["tokens"] == 0
    assert fresh["status"] == "ok"
    assert "Budget" not in fresh.get("message", "")
    resets = warned["spend"]["resetsAt"]
    assert warned["spend"] == {
        "window": "month",
        "tokens": 28,
        "cost": 0.028,
        "tokenLimit": 50,
        "resetsAt": resets,
    }
    assert warned["status"] == "ok"
    assert "Budget: 56% of the agent's month budget spent (resets at " in warned["message"]
    assert spent["status"] == "degraded"
    assert "Budget: the agent's month budget is spent" in spent["message"]
    assert agent.metrics.llm_cost_total.labels("harper", agent.server.config.model)._value.get() > 0.05
