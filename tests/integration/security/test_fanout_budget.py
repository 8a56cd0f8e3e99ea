"""A turn's parallel calls to peer agents share what the root caller has left (issue 46).

Each call to a peer carries what the root caller has left (`pallas.dev/budget`), and the peer
keeps to it. Before, every call of one step carried the whole remainder: four peers called at
once under a 100-token budget each spent up to it, and the caller was charged 375 tokens. Now a
call to a peer holds the remainder it carries until it returns (reported spend charged, the rest
released, also when it fails or is cancelled), and a sibling finding it all held waits for that,
then carries what is left. So a fan-out overruns the budget by at most what one peer's last
LLM call spent beyond its grant: one call's reservation.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastmcp import Client

from tests.support.agents import ServedAgent, agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, FakeUsage, Text, ToolCalls

LIMIT = 100
BUDGET = {"perCaller": {"window": "day", "tokens": LIMIT}}
SMALL = FakeUsage(10, 5)  # 15 tokens
BIG = FakeUsage(80, 10)  # 90 tokens: one worker LLM call
WORKERS = 4


def worker_turn(request: dict[str, Any]) -> Text | ToolCalls:
    """A worker that spends 90 tokens on a tool round, then would answer (if its budget allows)."""
    if request["messages"][-1]["role"] == "tool":
        return Text("done", usage=SMALL)
    return ToolCalls([Call("nothing__here")], usage=BIG)


@contextlib.asynccontextmanager
async def workers(llm: FakeOpenAI) -> AsyncIterator[list[ServedAgent]]:
    async with contextlib.AsyncExitStack() as stack:
        served = [
            await stack.enter_async_context(serve_agent(agent_config(llm.base_url, name=f"w{n}")))
            for n in range(WORKERS)
        ]
        yield served


async def test_parallel_peer_calls_of_one_turn_share_the_root_callers_budget() -> None:
    async with FakeOpenAI(default=worker_turn) as worker_llm, FakeOpenAI() as boss_llm:
        boss_llm.script(
            ToolCalls(
                [Call(f"w{n}__send_message", {"message": f"part {n}"}) for n in range(WORKERS)], usage=SMALL
            ),
            Text("all parts done", usage=SMALL),
        )
        async with workers(worker_llm) as served:
            peers = [{"name": f"w{n}", "url": agent.url} for n, agent in enumerate(served)]
            boss = agent_config(boss_llm.base_url, name="boss", budgets=BUDGET, agents=peers)
            async with serve_agent(boss) as served_boss, Client(served_boss.url, timeout=60) as client:
                result = await client.call_tool_mcp("send_message", {"message": "fan out"})
                again = await client.call_tool_mcp("send_message", {"message": "again"})
    worker_spend = len(worker_llm.completions) * (BIG.input + BIG.output)
    boss_spend = len(boss_llm.completions) * (SMALL.input + SMALL.output)
    charged = boss_spend + worker_spend
    print(f"fan-out of {WORKERS} peer calls under a {LIMIT}-token budget: {charged} tokens spent")
    # At most the budget and one worker call beyond it (before: 15 + 4 x 90 = 375).
    assert charged <= LIMIT + BIG.input + BIG.output, charged
    # The boss was stopped by its caller's budget, then the caller's next turn was refused.
    for answer in (result, again):
        assert answer.is_error, answer
        assert (answer.structured_content or {})["error"]["code"] == "BUDGET_EXCEEDED"
    refusal = (again.structured_content or {})["error"]["message"]
    assert f"spent {charged} tokens of its {LIMIT} per day" in refusal
