"""Credentials never reach a log line, wherever a client puts them.

A real `pallas agent` in oidc mode (real JWTs from tests/support/oidc) logs everything it can:
the Pallas loggers and every other logger at DEBUG, uvicorn's access and error lines included.
Clients send tokens in the `Authorization` header, in query strings (`?authorization=Bearer%20…`,
`?token=`, `?access_token=`), glued to letters, in a request line that is not valid HTTP and in
a head too large to read. Afterwards no token, and no 20-character slice of one, may be found
anywhere in what the process wrote.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Sequence
from urllib.parse import quote

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.integration.security.raw_http import head, send
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_servers import INITIALIZE
from tests.support.oidc import AUDIENCE, oidc_issuer

SLICE = 20
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# Every request is logged (the access log is on), each without its credential; the head too
# large to read is the last request sent.
EXPECTED_LINES = (
    "POST /mcp?authorization=[redacted] HTTP/1.1",
    "POST /mcp?access_token=[redacted]&x=[redacted] HTTP/1.1",
    "POST /healthz/abc[redacted-jwt] HTTP/1.1",
    "POST /mcp?state=[redacted] HTTP/1.1",
    "Invalid HTTP request received.",
    "with 431: request head over 16384 bytes",
)


def slices(token: str) -> set[str]:
    """Every `SLICE`-character piece of a token: a partly redacted token still leaks."""
    return {token[i : i + SLICE] for i in range(len(token) - SLICE + 1)}


async def test_no_token_in_any_log_line_wherever_it_was_sent() -> None:
    async with oidc_issuer() as issuer, FakeOpenAI(default=Text("hello")) as llm:
        config = agent_config(
            llm.base_url,
            name="research",
            auth={
                "mode": "oidc",
                "namespace": "agents",
                "resource": "http://research.agents.svc.cluster.local:8000/mcp",
                "oidc": {"issuer": issuer.url, "audience": AUDIENCE},
            },
        )
        env = {"PALLAS_LOG_LEVEL": "DEBUG", "PALLAS_ROOT_LOG_LEVEL": "DEBUG", "OPENAI_API_KEY": "k"}
        jwts = [issuer.token(sub=f"user{i}") for i in range(9)]
        opaque = [secrets.token_urlsafe(32) for _ in range(3)]
        async with run_agent_process(config, env=env) as agent, httpx2.AsyncClient() as http:
            # In the header, as clients do (one good call and one refused).
            transport = StreamableHttpTransport(agent.url, headers={"Authorization": f"Bearer {jwts[0]}"})
            async with Client(transport, timeout=30) as client:
                assert (await client.call_tool("send_message", {"message": "hi"})).content[0].text == "hello"
            await http.post(
                agent.url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {opaque[0]}"}
            )
            # In query strings, the way careless clients and proxies put them.
            targets = [
                f"/mcp?authorization=Bearer%20{jwts[1]}",
                f"/mcp?token={jwts[2]}",
                f"/mcp?access_token={jwts[3]}&x=1",
                f"/mcp?authorization={quote('Bearer ' + opaque[1])}",
                f"/mcp?token={opaque[2]}",
                # Glued to letters: no word boundary before the token.
                f"/healthz/abc{jwts[4]}",
                f"/mcp?state=xyz{jwts[5]}",
            ]
            for target in targets:
                await http.post(agent.base_url + target, json=INITIALIZE, headers=ACCEPT)
            # A request line that is not HTTP, and a head too large to read.
            await send(agent.port, f"GET /mcp?access_token={jwts[6]} HTTP/1.1 junk\r\n\r\n".encode())
            await send(agent.port, f"GET /x{jwts[7]}\x01 HTTP/1.1\r\nHost: a\r\n\r\n".encode())
            await send(agent.port, head("/mcp", f"Authorization: Bearer {jwts[8]}", "X-Pad: " + "p" * 20000))
            log = await logged(agent.stderr, EXPECTED_LINES)  # the last request's line comes last
    leaks = [(token[:12], piece) for token in jwts + opaque for piece in slices(token) if piece in log]
    assert not leaks, f"{len(leaks)} token slices in the log, e.g. {leaks[:3]}"
    # Every request was logged (the access log was on), each without its credential.
    for line in EXPECTED_LINES:
        assert line in log


async def logged(read: Callable[[], str], lines: Sequence[str], within: float = 10.0) -> str:
    """What the process wrote, once it holds every one of `lines` (or after `within` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        text = read()
        if all(line in text for line in lines) or loop.time() > deadline:
            return text
        await asyncio.sleep(0.02)
