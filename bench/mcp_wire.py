"""A lean MCP client for load generation: JSON-RPC over Streamable HTTP, one httpx2 client per session.

The benchmark's clients share one core with the fake LLM and the downstream servers, so the
client must cost less than the agent it measures. fastmcp's `Client` spends several times the
CPU of the raw exchange (anyio streams, pydantic models of every message, a background GET
stream). This speaks the same protocol by hand: `initialize` (protocol 2025-06-18, which
fast-agent's mcp 1.10.1 and our mcp 2.3 both accept) and `notifications/initialized`, then each
`tools/call` is one POST carrying the `Mcp-Session-Id`; the answer is read from the JSON body or
from the server-sent events of the reply, whichever the server chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from types import TracebackType
from typing import Any, Self

import httpx2

PROTOCOL = "2025-06-18"


class McpError(Exception):
    """The server answered with a JSON-RPC error, an error result or no answer at all."""


def _answer(response: httpx2.Response, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to `request_id` in a JSON or an event-stream body."""
    response.raise_for_status()
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        messages = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    else:
        messages = [response.json()]
    for message in messages:
        if isinstance(message, dict) and message.get("id") == request_id:
            if "error" in message:
                raise McpError(f"JSON-RPC error: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result
    raise McpError(f"no answer to request {request_id} in {response.text[:300]!r}")


class McpSession:
    """One MCP session (its own HTTP connection) to the server at `url`."""

    def __init__(self, url: str, *, timeout: float = 60) -> None:
        self.url = url
        self.timeout = timeout
        self._http = httpx2.AsyncClient(timeout=timeout)
        self._ids = itertools.count(1)
        self._headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    async def _exchange(self, method: str, params: dict[str, Any]) -> tuple[httpx2.Response, dict[str, Any]]:
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        response = await self._http.post(self.url, content=json.dumps(message), headers=self._headers)
        return response, _answer(response, request_id)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a JSON-RPC request; its result."""
        return (await self._exchange(method, params))[1]

    async def open(self) -> Self:
        """Initialize the session (raises when the server does not answer as an MCP server)."""
        params = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        }
        response, result = await self._exchange("initialize", params)
        if session := response.headers.get("mcp-session-id"):
            self._headers["mcp-session-id"] = session
        self._headers["mcp-protocol-version"] = result.get("protocolVersion", PROTOCOL)
        notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        (
            await self._http.post(self.url, content=json.dumps(notification), headers=self._headers)
        ).raise_for_status()
        return self

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; the text of its result (raises on an error result, or after `timeout`).

        The whole call is bounded: a server that keeps the reply's event stream open with pings
        but never answers would otherwise hold the caller forever.
        """
        async with asyncio.timeout(self.timeout):
            result = await self.request("tools/call", {"name": name, "arguments": arguments})
        text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        if result.get("isError"):
            raise McpError(f"{name} failed: {text[:300]}")
        return text

    async def close(self) -> None:
        """End the session (DELETE) and the connection."""
        if "mcp-session-id" in self._headers:
            with contextlib.suppress(httpx2.HTTPError):  # a server that is stopping need not answer
                await self._http.delete(self.url, headers=self._headers, timeout=2)
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        try:
            return await self.open()
        except BaseException:
            await self._http.aclose()
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
