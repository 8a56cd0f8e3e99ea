"""Delegation through `a2aAgents` carries the budget, as delegation over MCP does.

Before, a call to an A2A agent carried no budget and reported no spend: a Pallas agent reached
over A2A spent as it liked, and its spend never counted against the root caller. Now the
request's metadata carries what the root caller has left (`pallas.dev/budget`), a Pallas agent
answering over A2A keeps to it, and its task's final status reports what it spent
(`pallas.dev/spend`), which the calling agent charges to its caller.
"""

from __future__ import annotations

from fastmcp import Client

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, FakeUsage, Text, ToolCalls

SMALL = FakeUsage(10, 5)  # 15 tokens
BIG = FakeUsage(80, 10)  # 90 tokens
BUDGET = {"perCaller": {"window": "day", "tokens": 100}}


async def test_an_a2a_peer_keeps_to_the_root_callers_budget_and_its_spend_is_charged() -> None:
    async with FakeOpenAI() as boss_llm, FakeOpenAI() as worker_llm:
        # The boss spends 15 and delegates; the worker spends 90 of the 85 left, then wants
        # another round: refused. Charged the worker's 90, the boss may not answer either.
        worker_llm.script(ToolCalls([Call("nothing__here")], usage=BIG), Text("done", usage=SMALL))
        boss_llm.script(
            ToolCalls([Call("worker__send_message", {"message": "dig"})], usage=SMALL),
            Text("the worker answered", usage=SMALL),
        )
        worker = agent_config(worker_llm.base_url, name="worker")
        async with serve_agent(worker) as served_worker:
            boss = agent_config(
                boss_llm.base_url,
                name="boss",
                budgets=BUDGET,
                a2aAgents=[{"name": "worker", "url": served_worker.base_url}],
            )
            async with serve_agent(boss) as served_boss, Client(served_boss.url) as client:
                first = await client.call_tool_mcp("send_message", {"message": "go"})
                second = await client.call_tool_mcp("send_message", {"message": "again"})
    # The budget travelled: the worker stopped after the call that spent it.
    assert len(worker_llm.completions) == 1
    # The worker's spend was charged to the caller (15 + 90 of 100): the boss stops too, and
    # the caller's next turn is refused before any LLM call.
    for result in (first, second):
        assert result.is_error, result
        error = (result.structured_content or {})["error"]
        assert error["code"] == "BUDGET_EXCEEDED", error
    assert "spent 105 tokens of its 100 per day" in (first.structured_content or {})["error"]["message"]
    assert len(boss_llm.completions) == 1
