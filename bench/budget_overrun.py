"""Budget overrun benchmark: how far concurrent turns spend past a small budget; prints figures.

    .venv/bin/python bench/budget_overrun.py [--turns 80] [--limits 40,1000] [--answer-ms 50]

One agent served on loopback (the memory store), its LLM the scripted FakeOpenAI (the real Chat
Completions wire), each answer 18 tokens (10 in, 8 out) streamed over `--answer-ms`. For each
agent budget in `--limits` (tokens per hour), `--turns` clients send `send_message` at once and
the figures say what was spent:

- llm_calls, spent_tokens: the calls the provider got, and their tokens;
- overrun_tokens: spent past the limit (0 when under it); overrun_calls: the same in calls;
- refused: turns ended with `BUDGET_EXCEEDED`;
- wall_s: how long the burst took.

Target (issue 46): the overrun is at most one call's reservation (here one call: 18 tokens).
Before reservations, 80 turns under a 40-token budget spent 1,440 tokens (every turn passed its
check before any was charged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fastmcp import Client  # noqa: E402

from tests.support.agents import agent_config, serve_agent  # noqa: E402
from tests.support.fake_llm import FakeOpenAI, FakeUsage, Text  # noqa: E402

CALL = FakeUsage(10, 8)
CALL_TOKENS = CALL.input + CALL.output


async def burst(turns: int, limit: int, answer_seconds: float) -> dict[str, Any]:
    budgets = {"agent": {"window": "hour", "tokens": limit}}
    words = 5
    answer = Text("one two three four five", usage=CALL, interval=answer_seconds / words)
    async with (
        FakeOpenAI(default=answer) as llm,
        serve_agent(agent_config(llm.base_url, name=f"overrun-{limit}", budgets=budgets)) as agent,
        Client(agent.url, timeout=120) as client,
    ):
        started = time.perf_counter()
        results = await asyncio.gather(
            *(client.call_tool_mcp("send_message", {"message": f"turn {n}"}) for n in range(turns))
        )
        wall = time.perf_counter() - started
    calls = len(llm.completions)
    spent = calls * CALL_TOKENS
    over = max(spent - limit, 0)
    refused = sum(
        1
        for r in results
        if r.is_error and (r.structured_content or {}).get("error", {}).get("code") == "BUDGET_EXCEEDED"
    )
    return {
        "limit_tokens": limit,
        "turns": turns,
        "llm_calls": calls,
        "spent_tokens": spent,
        "overrun_tokens": over,
        "overrun_calls": round(over / CALL_TOKENS, 2),
        "refused": refused,
        "wall_s": round(wall, 2),
    }


async def main(turns: int, limits: list[int], answer_ms: float) -> dict[str, Any]:
    return {
        "call_tokens": CALL_TOKENS,
        "bursts": [await burst(turns, limit, answer_ms / 1000) for limit in limits],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=80, help="concurrent turns per burst")
    parser.add_argument("--limits", default="40,1000", help="agent budgets to try, tokens per hour")
    parser.add_argument("--answer-ms", type=float, default=50.0, help="how long each answer streams")
    args = parser.parse_args()
    chosen = [int(x) for x in args.limits.split(",")]
    print(json.dumps(asyncio.run(main(args.turns, chosen, args.answer_ms)), indent=2))
