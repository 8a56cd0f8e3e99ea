"""Workflow benchmark: a 3-step chain against the same three calls made by a client. Prints figures.

    .venv/bin/python bench/workflow_chain.py [--rounds 60]

`pallas run` serves three step agents (researcher, writer, editor) and a chain agent over them;
the fake LLM in this process answers at once (`<agent>: <message>`), so the figures are Pallas's
own costs. Each round, one client session (kept open, as a client keeps it) makes:

- `chain`: one send_message to the chain agent, which calls the three steps in turn;
- `direct`: three send_message calls to the step agents in turn, each with the previous answer,
  which is what the chain does for the client.

Rounds alternate the two, so drift on a shared machine touches both alike. Overhead =
P50(chain) / P50(direct) - 1. Target (issue 49): at most 10 % more wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastmcp import Client
from mcp.types import TextContent

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.runtime.test_workflows import STEPS, echo, running  # noqa: E402
from tests.support.fake_llm import FakeOpenAI  # noqa: E402

CHAIN = "bench-chain"
"""A chain over the three step agents, added to the test's workflows for this run."""


async def timed(client: Client[Any], message: str) -> tuple[float, str]:
    started = time.perf_counter()
    result = await client.call_tool_mcp("send_message", {"message": message})
    elapsed = time.perf_counter() - started
    first = result.content[0]
    assert not result.is_error, result.content
    assert isinstance(first, TextContent), result.content
    return elapsed, first.text


async def main(rounds: int) -> None:
    from tests.integration.runtime import test_workflows

    test_workflows.WORKFLOWS[CHAIN] = {"chain": {"steps": STEPS}}
    async with FakeOpenAI() as llm:
        llm.default = echo()
        with tempfile.TemporaryDirectory() as tmp:
            async with (
                running(Path(tmp), llm, CHAIN, log=Path(tmp) / "pallas-run.log") as run,
                contextlib.AsyncExitStack() as stack,
            ):
                clients = {a: await stack.enter_async_context(Client(run.url(a))) for a in [*STEPS, CHAIN]}
                chain, direct = [], []
                for number in range(rounds + 5):  # the first five warm up
                    message = f"round {number}"
                    chain_time, chain_answer = await timed(clients[CHAIN], message)
                    total, said = 0.0, message
                    for step in STEPS:
                        elapsed, said = await timed(clients[step], said)
                        total += elapsed
                    assert said == chain_answer, (said, chain_answer)
                    if number >= 5:
                        chain.append(chain_time)
                        direct.append(total)
    p50_chain, p50_direct = statistics.median(chain), statistics.median(direct)
    print(f"rounds: {rounds}, steps: {len(STEPS)}, fake LLM latency: 0")
    print(f"chain  (1 call, 3 steps inside)  P50 {p50_chain * 1000:7.2f} ms")
    print(f"direct (3 calls by the client)   P50 {p50_direct * 1000:7.2f} ms")
    print(f"overhead: {(p50_chain / p50_direct - 1) * 100:+.1f} % wall time (target <= +10 %)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    asyncio.run(main(parser.parse_args().rounds))
