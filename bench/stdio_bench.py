"""What the stdio bridge costs: a tool call through `pallas bridge` against the same server over HTTP.

    .venv/bin/python bench/stdio_bench.py [--calls 300]

server-everything (from the MCP peers cache, hack/build/mcp-peers.sh) is run twice on loopback:
once as its own Streamable HTTP server, once over stdio behind the bridge `pallas run` hosts
(a child process, fastmcp's proxy in front). One MCP client session (the SDK's `ClientSession`,
as an agent's) calls its `echo` tool `--calls` times on each, one call at a time; printed: P50
and P95 of each and of the difference, and how long the bridge takes from start to a session
with the server (the server's own start-up included).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pallas_api import names
from pallas_runtime.stdio.bridge import Bridge
from pallas_runtime.stdio.links import ChildProcess, child_environment
from tests.support.mcp_peers import install_mcp_peers, run_server_everything
from tests.support.mcp_servers import serve_app

TOKEN = "bench-bridge-credential"
"""The bridge's credential; the direct server ignores the header."""


@asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={names.BRIDGE_TOKEN_HEADER: TOKEN}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        yield mcp


async def timed_calls(url: str, calls: int) -> list[float]:
    async with session(url) as mcp:
        for _ in range(10):  # warm up
            await mcp.call_tool("echo", {"message": "warm"})
        out = []
        for i in range(calls):
            started = time.perf_counter()
            await mcp.call_tool("echo", {"message": f"call {i}"})
            out.append((time.perf_counter() - started) * 1000)
        return out


def p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


async def main(calls: int) -> None:
    peers = install_mcp_peers()
    with run_server_everything(peers) as direct:
        http = await timed_calls(direct.url, calls)
    name = "everything"
    bridge = Bridge(
        name,
        lambda: ChildProcess(
            name,
            str(peers.node),
            [str(peers.server_everything), "stdio"],
            child_environment({"HOME": "/tmp"}),
        ),
        token=lambda: TOKEN,
    )
    started = time.perf_counter()
    async with serve_app(bridge.app()) as running:
        assert bridge.shared is not None
        await bridge.shared.session(60)
        ready = (time.perf_counter() - started) * 1000
        bridged = await timed_calls(running.url, calls)
    print(f"{calls} sequential echo calls, one client session, loopback (ms)")
    print(f"{'':28} {'P50':>7} {'P95':>7}")
    print(f"{'server-everything over HTTP':28} {p(http, 50):7.2f} {p(http, 95):7.2f}")
    print(f"{'over stdio, through bridge':28} {p(bridged, 50):7.2f} {p(bridged, 95):7.2f}")
    print(f"{'bridge overhead':28} {p(bridged, 50) - p(http, 50):7.2f} {p(bridged, 95) - p(http, 95):7.2f}")
    print(f"bridge start to a session with the server: {ready:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
