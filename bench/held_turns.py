"""Held turns beside a turn answered in place (issue 51). Prints P50s.

    PYTHONPATH=. .venv/bin/python bench/held_turns.py [--rounds 60]

One agent served in this process on a fake LLM that answers at once, so the figures are Pallas's
own costs: `send_message` answered in place (2026-07-28 client), the same as a task (the call,
then `tasks/get` until it completed), and for an agent with a `requireApproval` server (one that may
ask) a client without elicitation (in place) and one with it (the turn is held for MRTR).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp import Client, FastMCP

from pallas_runtime.commands.chat.tasks import TaskHandle, TasksClient, poll
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_servers import serve

WARM_UP = 5


def guarded_ops(url: str) -> list[dict[str, Any]]:
    """A downstream server with an approval policy: the agent may ask, so a turn can be held."""
    return [{"name": "ops", "url": url, "requireApproval": {"tools": ["delete_*"]}}]


async def p50(rounds: int, call: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for i in range(rounds + WARM_UP):
        started = time.perf_counter()
        await call()
        if i >= WARM_UP:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def main(rounds: int) -> None:
    async with FakeOpenAI() as llm:
        llm.default = Text("ok")
        async with (
            serve(FastMCP("ops")) as ops,
            serve_agent(agent_config(llm.base_url)) as plain,
            serve_agent(agent_config(llm.base_url, name="guarded", servers=guarded_ops(ops.url))) as guarded,
        ):
            async with Client(plain.url) as client:
                in_place = await p50(rounds, lambda: client.call_tool_mcp("send_message", {"message": "hi"}))
            async with Client(plain.url, extensions=[TasksClient()]) as client:

                async def task() -> None:
                    handle = await client.session.call_tool(
                        "send_message", {"message": "hi"}, allow_claimed=True
                    )
                    assert isinstance(handle, TaskHandle)
                    await poll(client.session, handle.task_id)

                tasked = await p50(rounds, task)
            async with Client(guarded.url) as client:
                unasked = await p50(rounds, lambda: client.call_tool_mcp("send_message", {"message": "hi"}))

            async def never(*_: Any) -> None:
                return None

            async with Client(guarded.url, elicitation_handler=never) as client:
                held = await p50(rounds, lambda: client.call_tool_mcp("send_message", {"message": "hi"}))
    print(f"in place      {in_place:6.1f} ms")
    print(f"task + poll   {tasked:6.1f} ms")
    print(f"may ask, in place (no elicitation) {unasked:6.1f} ms")
    print(f"may ask, held for MRTR             {held:6.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    asyncio.run(main(parser.parse_args().rounds))
