"""The serving layer's own cost: fastmcp against the MCP SDK's low-level server, SSE against JSON.

    .venv/bin/python bench/serving_layer_bench.py [--rounds 8] [--calls 300] [--clients 8]

Issue 35, item 1 asks whether the agent should serve on the MCP SDK's low-level `Server`
instead of fastmcp, and answer JSON instead of an event stream when a call carries no progress
token. Before rewriting the agent's surface, this measures the most either change could win:
the same one-tool server (`echo`) four ways, each a process of its own pinned to CPU 0,

- `fastmcp`: `FastMCP` with a `@tool`, `http_app()` (the bare round trip of bench/agent_bench.py);
- `fastmcp-json`: the same, `http_app(json_response=True)`;
- `lowlevel`: `mcp.server.lowlevel.Server(on_list_tools=, on_call_tool=)`, `streamable_http_app()`;
- `lowlevel-json`: the same, `streamable_http_app(json_response=True)`.

All four take `--calls` `tools/call`s per round from `--clients` sessions each, at the same time
(the machine's speed drifts over seconds: see docs/runtime.md, "What traces cost"), for
`--rounds` rounds; the clients (bench/mcp_wire.py) run here, on CPU 1. Printed: each server's
CPU per call (user + system from /proc, median of the rounds, with the spread) and its ratio to
`fastmcp`. Whatever the agent does beyond a tool call (the LLM calls, downstream calls, its own
bookkeeping) is the same on either layer, so the difference per call here bounds what moving the
agent onto the low-level server, or answering JSON, could save per message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_bench import answers_http, cpu_seconds, pinned_process
from mcp_wire import McpSession

from tests.support.mcp_peers import free_port

FASTMCP = """
import sys
import uvicorn
from fastmcp import FastMCP
mcp = FastMCP("bare")
@mcp.tool(output_schema=None)
async def echo(message: str) -> str:
    return message
app = mcp.http_app(path="/mcp", json_response=sys.argv[2] == "json")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

LOWLEVEL = """
import sys
import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
ECHO = types.Tool(
    name="echo",
    input_schema={"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
)
async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[ECHO])
def text(value):
    return [types.TextContent(type="text", text=value)]
async def call_tool(ctx, params):
    if params.name != "echo":
        return types.CallToolResult(content=text("no such tool"), is_error=True)
    return types.CallToolResult(content=text(str(params.arguments["message"])))
server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
app = server.streamable_http_app(streamable_http_path="/mcp", json_response=sys.argv[2] == "json")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

SERVERS = {
    "fastmcp": (FASTMCP, "sse"),
    "fastmcp-json": (FASTMCP, "json"),
    "lowlevel": (LOWLEVEL, "sse"),
    "lowlevel-json": (LOWLEVEL, "json"),
}
WARM_UP = 50


async def round_of_calls(url: str, pid: int, calls: int, clients: int) -> float:
    """CPU seconds per call of the server at `url` over `calls` calls from `clients` sessions."""
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(McpSession(url)) for _ in range(clients)]
        for session in sessions:
            await session.call_tool("echo", {"message": "hi"})
        left = calls

        async def worker(session: McpSession) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                if await session.call_tool("echo", {"message": "hi"}) != "hi":
                    raise AssertionError("echo answered something else")

        before = cpu_seconds(pid)
        async with asyncio.TaskGroup() as group:
            for session in sessions:
                group.create_task(worker(session))
        return (cpu_seconds(pid) - before) / calls


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        async with contextlib.AsyncExitStack() as stack:
            urls: dict[str, tuple[str, int]] = {}
            for name, (source, answer) in SERVERS.items():
                script = tmp / f"serve_{name.replace('-', '_')}.py"  # not fastmcp.py: it would shadow
                script.write_text(source)
                port = free_port()
                url = f"http://127.0.0.1:{port}/mcp"
                running = await stack.enter_async_context(
                    pinned_process(
                        [sys.executable, str(script), str(port), answer],
                        answers_http(url),
                        tmp / f"{name}.log",
                    )
                )
                urls[name] = (url, running.pid)
                async with McpSession(url) as session:  # connections, caches, lazy imports
                    for _ in range(WARM_UP):
                        await session.call_tool("echo", {"message": "hi"})
            per_call: dict[str, list[float]] = {name: [] for name in SERVERS}
            for number in range(args.rounds):
                got = await asyncio.gather(
                    *(round_of_calls(url, pid, args.calls, args.clients) for url, pid in urls.values())
                )
                for name, cpu in zip(urls, got, strict=True):
                    per_call[name].append(cpu)
                line = ", ".join(f"{name} {cpu * 1e3:.2f}" for name, cpu in zip(urls, got, strict=True))
                print(f"round {number + 1}: ms of server CPU per call: {line}", flush=True)
    base = statistics.median(per_call["fastmcp"])
    print(f"\nmedians of {args.rounds} rounds of {args.calls} calls from {args.clients} clients each:")
    for name, values in per_call.items():
        median = statistics.median(values)
        ratios = [v / b for v, b in zip(values, per_call["fastmcp"], strict=True)]
        spread = f"{min(values) * 1e3:.2f}..{max(values) * 1e3:.2f}"
        print(
            f"  {name:14} {median * 1e3:6.2f} ms CPU per call ({spread}),"
            f" {median / base:5.2f}x fastmcp (per round {min(ratios):.2f}..{max(ratios):.2f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300, help="calls per server per round")
    parser.add_argument("--clients", type=int, default=8, help="sessions per server")
    asyncio.run(main(parser.parse_args()))
