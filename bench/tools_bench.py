"""Tools at scale: what `toolExposure` saves, and what the gateway tools cost. Prints figures.

    .venv/bin/python bench/tools_bench.py [--tools 500] [--calls 300]

One process: a wide MCP server (`--tools` tools of ~450 schema tokens each, tests/support), the
scripted fake OpenAI server, and an agent (`toolExposure.gateway: true`) served over real HTTP
on loopback. Measured:

- the first LLM request's tool definitions and the turn's estimated input tokens (bytes/3, as
  the agent estimates; the sum over the turn's LLM requests) for one turn that finds a tool deep
  in the list and calls it, in `all` and in `onDemand`;
- `list_servers`, `get_server_tools` (a pattern of 10 tools) and `execute_tool` round trips
  through the agent, P50/P95 of `--calls` sequential calls, and `execute_tool`'s overhead: its
  round trip minus the same tool called on the server directly by the same client (the MCP
  SDK's `ClientSession`).

Targets (seed 003's gateway): `execute_tool` overhead < 30 ms P95, `get_server_tools` < 300 ms
P95, `list_servers` < 50 ms P95.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pallas_api.config import parse_config
from pallas_runtime.agent.window import text_tokens
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve, serve_app, wide_mcp


def _client(url: str) -> Client[Any]:
    return Client(StreamableHttpTransport(url), timeout=30)


@asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    """The MCP SDK's own session: the same thin client for the agent and for the server directly."""
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30))
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


async def _timed(calls: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(10):  # warm-up: connections, caches
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def _config(llm: FakeOpenAI, url: str, mode: str) -> Any:
    return parse_config(
        {
            "name": "bench",
            "model": llm.models[0],
            "provider": {"name": "llm", "type": "openai", "baseURL": llm.base_url, "maxRetries": 0},
            "servers": [{"name": "wide", "url": url, "timeoutSeconds": 30}],
            "capabilities": {"contextWindow": 400_000, "maxOutputTokens": 8192},
            "toolExposure": {"mode": mode, "gateway": True},
        }
    )


async def _turn(llm: FakeOpenAI, url: str, mode: str, tools: int) -> tuple[int, int, int]:
    """One turn that finds tool `op_<last-ish>` and calls it: first request's tool tokens, turn tokens."""
    deep = f"op_{tools - 27:03d}"
    if mode == "onDemand":
        llm.script(
            ToolCalls([Call("get_server_tools", {"server": "wide", "names": [deep]})]),
            ToolCalls([Call("execute_tool", {"server": "wide", "tool": deep, "args": {"field_0": "x"}})]),
            Text("done"),
        )
    else:
        llm.script(ToolCalls([Call(f"wide__{deep}", {"field_0": "x"})]), Text("done"))
    before = len(llm.completions)
    server = build_server(_config(llm, url, mode), environ={})
    async with serve_app(agent_app(server)) as agent, _client(agent.url) as client:
        result = await client.call_tool("send_message", {"message": f"run {deep} on x"})
    assert result.content[0].text == "done", result
    requests = llm.completions[before:]
    first_tools = text_tokens(json.dumps(requests[0].json.get("tools", [])))
    turn = sum(text_tokens(json.dumps(r.json)) for r in requests)
    return first_tools, turn, len(requests)


async def main(tools: int, calls: int) -> None:
    async with FakeOpenAI() as llm, serve(wide_mcp(tools)) as wide:
        print(f"wide server: {tools} tools; estimated tokens (bytes/3)\n")
        print(f"{'mode':<10} {'first request tools':>20} {'turn input':>12} {'LLM requests':>13}")
        for mode in ("all", "onDemand"):
            first, turn, count = await _turn(llm, wide.url, mode, tools)
            print(f"{mode:<10} {first:>20,} {turn:>12,} {count:>13}")

        async with (
            serve_app(agent_app(build_server(_config(llm, wide.url, "onDemand"), environ={}))) as agent,
            session(agent.url) as through,
            session(wide.url) as direct,
        ):
            args = {"field_0": "x"}
            rows = {
                "list_servers": await _timed(calls, lambda: through.call_tool("list_servers", {})),
                "get_server_tools": await _timed(
                    calls,
                    lambda: through.call_tool("get_server_tools", {"server": "wide", "pattern": "op_12*"}),
                ),
                "execute_tool": await _timed(
                    calls,
                    lambda: through.call_tool(
                        "execute_tool", {"server": "wide", "tool": "op_123", "args": args}
                    ),
                ),
                "direct call": await _timed(calls, lambda: direct.call_tool("op_123", args)),
            }
        print(f"\n{'operation':<18} {'P50 ms':>8} {'P95 ms':>8}   ({calls} sequential calls each)")
        for name, samples in rows.items():
            p50, p95 = percentiles(samples)
            print(f"{name:<18} {p50:>8.2f} {p95:>8.2f}")
        overhead = [
            a - b for a, b in zip(sorted(rows["execute_tool"]), sorted(rows["direct call"]), strict=True)
        ]
        p50, p95 = percentiles(overhead)
        print(f"{'execute_tool overhead':<18} {p50:>5.2f} {p95:>8.2f}   (targets: overhead P95 < 30, "
              "get_server_tools < 300, list_servers < 50)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=500)
    parser.add_argument("--calls", type=int, default=300)
    ns = parser.parse_args()
    asyncio.run(main(ns.tools, ns.calls))
