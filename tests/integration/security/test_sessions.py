"""MCP sessions: a full table makes room by closing the session idle longest, never refusing
newcomers while any session is idle, and one authenticated caller cannot hold more than its cap.

Before, the MCP SDK's defaults applied (10,000 sessions, 30 idle minutes): ~10,000 `initialize`
calls locked every new client out with 503 for half an hour. Each case opens sessions the way a
client does (`initialize`, then `notifications/initialized`) over real HTTP to a real agent, and
asks each session for a `ping` afterwards: 200 while it lives, 404 once it was closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer

PROTOCOL = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
RESOURCE = "http://research.agents.svc.cluster.local:8000/mcp"
IDLE_TIMEOUT, PAST_THE_IDLE_TIMEOUT = 1, 1.5
"""A session's idle timeout (seconds, on the agent's loop clock), and a wait past it."""


async def open_session(http: httpx2.AsyncClient, url: str, token: str | None = None) -> str:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
    opened = await http.post(url, json=INITIALIZE, headers=headers)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    headers |= {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    initialized = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert initialized.status_code == 202, initialized.text
    return session


async def ping(http: httpx2.AsyncClient, url: str, session: str, token: str | None = None) -> int:
    headers = {**ACCEPT, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    answer = await http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers)
    return answer.status_code


async def test_a_full_table_closes_the_session_idle_longest_never_a_busy_one(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("done at last")))
    config = agent_config(fake_openai.base_url, sessions={"maxSessions": 8})
    async with serve_agent(config) as agent, httpx2.AsyncClient(timeout=10) as http:
        # The oldest session is busy: its send_message waits at the model all along.
        async with Client(StreamableHttpTransport(agent.url), mode="legacy") as busy_client:
            call = asyncio.create_task(busy_client.call_tool("send_message", {"message": "slow one"}))
            await fake_openai.held.wait()
            opened = [await open_session(http, agent.url) for _ in range(8 + 4)]
            # Newcomers always got in; the four idle longest made room (the busy one held on).
            answers = [await ping(http, agent.url, s) for s in opened]
            assert answers == [404] * 5 + [200] * 7
            release.set()
            result = await call
        assert result.content[0].text == "done at last"


async def test_a_table_of_busy_sessions_refuses_a_newcomer_with_503(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release), Hold(release))
    config = agent_config(fake_openai.base_url, sessions={"maxSessions": 2})
    async with serve_agent(config) as agent, httpx2.AsyncClient(timeout=10) as http:
        clients = [Client(StreamableHttpTransport(agent.url), mode="legacy") for _ in range(2)]
        async with clients[0] as first, clients[1] as second:
            calls = [
                asyncio.create_task(c.call_tool("send_message", {"message": "m"})) for c in (first, second)
            ]
            await fake_openai.holding_at_least(2)
            refused = await http.post(agent.url, json=INITIALIZE, headers=ACCEPT)
            assert refused.status_code == 503
            release.set()
            await asyncio.gather(*calls)
        # Once they are idle again a newcomer gets in.
        await open_session(http, agent.url)


async def test_a_session_unused_for_the_idle_timeout_is_closed(fake_openai: FakeOpenAI) -> None:
    config = agent_config(fake_openai.base_url, sessions={"idleTimeoutSeconds": IDLE_TIMEOUT})
    async with serve_agent(config) as agent, httpx2.AsyncClient(timeout=10) as http:
        session = await open_session(http, agent.url)
        assert await ping(http, agent.url, session) == 200
        # Nothing to wait on: any request would be activity, so the session must be left alone.
        await asyncio.sleep(PAST_THE_IDLE_TIMEOUT)
        assert await ping(http, agent.url, session) == 404


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with oidc_issuer() as running:
        yield running


def oidc_auth(issuer: Issuer) -> dict[str, Any]:
    """The agent's `auth` checking callers' tokens from `issuer`."""
    return {
        "mode": "oidc",
        "namespace": "agents",
        "resource": RESOURCE,
        "oidc": {"issuer": issuer.url, "audience": AUDIENCE},
    }


async def test_one_caller_cannot_hold_more_than_its_cap_nor_displace_others(issuer: Issuer) -> None:
    auth = oidc_auth(issuer)
    config = agent_config(
        "http://127.0.0.1:9/v1", name="research", auth=auth, sessions={"maxSessions": 100, "maxPerCaller": 3}
    )
    alice, bob = issuer.token(sub="alice"), issuer.token(sub="bob")
    async with serve_agent(config) as agent, httpx2.AsyncClient(timeout=10) as http:
        bobs = [await open_session(http, agent.url, bob) for _ in range(2)]
        alices = [await open_session(http, agent.url, alice) for _ in range(3 + 5)]
        # Alice keeps her three newest; each of her extra sessions displaced her own idlest one.
        assert [await ping(http, agent.url, s, alice) for s in alices] == [404] * 5 + [200] * 3
        assert [await ping(http, agent.url, s, bob) for s in bobs] == [200, 200]
