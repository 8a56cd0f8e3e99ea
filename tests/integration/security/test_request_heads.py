"""Oversized, slow and silent requests against a real `pallas agent` process, before any auth.

Before the listeners bounded request heads, two connections each sending a 32 MiB header took an
agent from 167 to 297 MB and held it there, and half-open connections stayed open for good. Now
every head is measured as it arrives (431 past 16 KiB or 100 fields, 414 for a request target
over it, 408 when it is not complete within the head timeout), what the process holds stays
small, and other clients are served meanwhile. Each attack is bounded in bytes and seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx2
import pytest
from fastmcp import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.security.raw_http import (
    MiB,
    RssWatch,
    closed_within,
    head,
    send,
    silent_connections,
)
from tests.support.agents import AgentProcess, agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Text

HEAD_TIMEOUT = 1.0
KEEP_ALIVE = 1.0
RSS_BOUND = 24 * MiB
"""Peak growth allowed under the attacks; unbounded heads cost +130 MiB for two 32 MiB headers."""


@contextlib.asynccontextmanager
async def agent(llm: FakeOpenAI, **http: float) -> AsyncIterator[AgentProcess]:
    config = agent_config(llm.base_url, http=http)
    async with run_agent_process(config, env={"OPENAI_API_KEY": "k"}) as running:
        yield running


async def ask(url: str) -> str:
    """One MCP call by a well-behaved client (a fresh session)."""
    async with Client(url, timeout=20) as client:
        result = await client.call_tool("send_message", {"message": "hi"})
    return str(result.content[0].text)


async def test_oversized_heads_are_refused_and_memory_stays_bounded() -> None:
    async with FakeOpenAI(default=Text("still here")) as llm, agent(llm) as running:
        port = running.port
        assert await ask(running.url) == "still here"  # warm: the first call's imports are done
        watch = RssWatch(running.pid)
        async with watch.watching():
            huge = head("/mcp", "X-Big: " + "a" * (32 * MiB), method="POST")
            attacks = await asyncio.gather(
                send(port, huge),
                send(port, huge),
                send(port, head("/healthz?" + "q" * (32 * 1024))),
                send(port, head("/healthz", *(f"X-{i}: v" for i in range(101)))),
                send(port, head("/healthz", "Authorization: Bearer " + "t" * (40 * 1024))),
                ask(running.url),
            )
        print(watch.report("agent under 2 x 32 MiB headers and 3 more oversized heads"))
        big, big_too, long_target, many, long_token, answer = attacks
        assert (big.status, big_too.status) == (431, 431)
        assert big.body == b"request head over 16384 bytes"
        assert long_target.status == 414
        assert many.status == 431
        assert many.body == b"more than 100 header fields"
        assert long_token.status == 431
        assert answer == "still here"
        assert watch.peak_growth < RSS_BOUND, watch.report("agent")

        # Within the limits everything is served as before.
        just_under = await send(port, head("/healthz", "X-Pad: " + "p" * (15 * 1024)))
        exactly_100 = await send(port, head("/healthz", *(f"X-{i}: v" for i in range(99))))
        assert (just_under.status, exactly_100.status) == (200, 200)
        # The body limit (4 MiB) holds as before, declared or chunked.
        declared = head("/mcp", "Content-Type: application/json", f"Content-Length: {5 * MiB}", method="POST")
        chunked = head("/mcp", "Content-Type: application/json", "Transfer-Encoding: chunked", method="POST")
        chunked += f"{5 * MiB:x}\r\n".encode() + b"x" * (5 * MiB) + b"\r\n0\r\n\r\n"
        assert (await send(port, declared)).status == 413
        assert (await send(port, chunked)).status == 413
        async with httpx2.AsyncClient() as http:
            metrics = (await http.get(running.base_url + "/metrics")).text
        refused = {
            sample.labels["reason"]: sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples
            if sample.name == "pallas_requests_refused_total"
        }
        assert refused == {"head_too_large": 3, "too_many_headers": 1, "uri_too_long": 1, "too_large": 2}


async def test_slow_and_silent_connections_are_closed_while_others_are_served() -> None:
    async with (
        FakeOpenAI(default=Text("served")) as llm,
        agent(llm, headTimeoutSeconds=HEAD_TIMEOUT, keepAliveSeconds=KEEP_ALIVE) as running,
    ):
        port = running.port
        # One answered message first: the agent loads its provider's SDK after it is ready, and
        # that growth is not what this test bounds.
        assert await ask(running.url) == "served"
        watch = RssWatch(running.pid)
        async with watch.watching(), silent_connections(port, 200) as silent:
            slow, trickle, answer, *closed = await asyncio.gather(
                # Half a head, then nothing; a head sent one byte every 0.1 s.
                send(port, head("/healthz", "X-A: b", end=False)),
                send(port, head("/healthz", "X-Slow: " + "s" * 40), chunk=1, pause=0.1),
                ask(running.url),
                *(closed_within(reader, HEAD_TIMEOUT + 4) for reader in silent),
            )
        print(watch.report("agent with 200 silent connections and 2 slow heads"))
        assert (slow.status, trickle.status) == (408, 408)
        assert slow.body == b"request head not complete within 1s"
        assert HEAD_TIMEOUT <= trickle.seconds < HEAD_TIMEOUT + 1.5, "a trickle must not reset the clock"
        assert answer == "served"
        assert all(seconds is not None for seconds in closed), "a silent connection stayed open"
        assert max(s for s in closed if s is not None) < HEAD_TIMEOUT + 2
        assert watch.peak_growth < RSS_BOUND, watch.report("agent")

        # An idle keep-alive connection goes after keepAliveSeconds.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/healthz"))
        assert (await reader.readuntil(b"}")).startswith(b"HTTP/1.1 200")
        idle = await closed_within(reader, KEEP_ALIVE + 3)
        writer.close()
        assert idle is not None
        assert idle < KEEP_ALIVE + 1


@pytest.mark.parametrize("limit", [4096, 65536])
async def test_the_head_limit_is_the_configured_one(limit: int) -> None:
    async with FakeOpenAI() as llm, agent(llm, maxHeadBytes=limit, maxHeaders=20) as running:
        fits = await send(running.port, head("/healthz", "X-Pad: " + "p" * (limit - 200)))
        over = await send(running.port, head("/healthz", "X-Pad: " + "p" * (limit + 10)))
        many = await send(running.port, head("/healthz", *(f"X-{i}: v" for i in range(20))))
    assert (fits.status, over.status, many.status) == (200, 431, 431)
    assert over.body == f"request head over {limit} bytes".encode()
