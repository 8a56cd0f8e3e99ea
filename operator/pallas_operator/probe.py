"""MCP checks of a running agent: verification (initialize + tools/list) and `get_health`.

Every check is bounded by one timeout and never raises: a failure is a result, reported in
status, so a broken agent degrades and never crashes the operator. Messages are cut short and
carry no response bodies beyond the health message the agent itself chose to publish.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import mcp_types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pallas_operator.api.status import ServerInfo
from pallas_operator.status import HealthResult, Verification

MAX_MESSAGE = 300
HEALTH_STATUSES = ("ok", "degraded", "error")


def _describe(exc: BaseException) -> str:
    """A short, safe description of a failure (exception groups unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).strip() or type(exc).__name__
    return text[:MAX_MESSAGE]


@asynccontextmanager
async def _session(url: str, budget: float) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(budget), follow_redirects=True) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=budget) as session,
    ):
        yield session


async def verify(url: str, budget: float) -> Verification:
    """Initialize an MCP session and list the tools (all pages)."""
    try:
        async with asyncio.timeout(budget), _session(url, budget) as session:
            init = await session.initialize()
            tools: list[str] = []
            cursor: str | None = None
            while True:
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_tools(params=params)
                tools += [t.name for t in page.tools]
                cursor = page.next_cursor
                if not cursor or len(tools) > 1000:
                    break
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Verification(ok=False, message=f"MCP verification of {url} failed: {_describe(exc)}")
    info = init.server_info
    return Verification(
        ok=True,
        server_info=ServerInfo(
            name=info.name, version=info.version or "", protocol_version=init.protocol_version
        ),
        tools=tuple(sorted(set(tools))),
    )


def parse_health(text: str) -> HealthResult:
    """Read get_health's JSON answer; anything else is a failed check."""
    try:
        data = json.loads(text)
    except ValueError:
        return HealthResult(None, "get_health did not return JSON")
    status = data.get("status") if isinstance(data, dict) else None
    if status not in HEALTH_STATUSES:
        return HealthResult(None, "get_health returned no valid status")
    message = data.get("message") or ""
    return HealthResult(status, str(message)[:MAX_MESSAGE])


async def check_health(url: str, budget: float) -> HealthResult:
    """Call the agent's `get_health` tool."""
    try:
        async with asyncio.timeout(budget), _session(url, budget) as session:
            await session.initialize()
            result = await session.call_tool("get_health", {})
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        return HealthResult(None, _describe(exc))
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]  # type: ignore[union-attr]
    if result.is_error:
        return HealthResult(None, ("get_health failed: " + " ".join(texts))[:MAX_MESSAGE])
    return parse_health(texts[0] if texts else "")
