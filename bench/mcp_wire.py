"""A lean MCP client for load generation: JSON-RPC over Streamable HTTP, one aiohttp session each.

The benchmark's clients share one core with the fake LLM and the downstream servers, so a
client must cost little beside the agent it measures. fastmcp's `Client` spends several times
the CPU of the exchange itself (anyio streams, pydantic models of every message, a background
GET stream), and even a bare httpx2 `AsyncClient` costs ~1.6 ms of CPU per request here against
~0.4 ms for aiohttp's (C HTTP parser; measured on a trivial endpoint). This speaks the protocol
by hand: `initialize` (protocol 2025-06-18, which fast-agent's mcp 1.10.1 and our mcp 2.3 both
accept) and `notifications/initialized`, then each `tools/call` is one POST carrying the
`Mcp-Session-Id`; the answer is read from the JSON body or from the server-sent events of the
reply, whichever the server chose.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from types import TracebackType
from typing import Any, Self

import aiohttp

PROTOCOL = "2025-06-18"


class McpError(Exception):
    """The server answered with a JSON-RPC error, an error result or no answer at all."""


def answer(content_type: str, body: str, request_id: int) -> dict[str, Any]:
    """The JSON-RPC result for `request_id` in a JSON or an event-stream body."""
    if content_type.startswith("text/event-stream"):
        messages = [
            json.loads(line[5:])
            for line in body.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
    else:
        messages = [json.loads(body)]
    for message in messages:
        if isinstance(message, dict) and message.get("id") == request_id:
            if "error" in message:
                raise McpError(f"JSON-RPC error: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result
    raise McpError(f"no answer to request {request_id} in {body[:300]!r}")


class McpSession:
    """One MCP session, on a connection of its own, to the server at `url`.

    Every request is bounded by `timeout` seconds, the whole exchange: a server that keeps the
    reply's event stream open with pings but never answers would otherwise hold the caller.
    """

    def __init__(self, url: str, *, timeout: float = 60) -> None:
        self.url = url
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))
        self._ids = itertools.count(1)
        self._headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    async def _post(self, message: dict[str, Any]) -> tuple[aiohttp.ClientResponse, str]:
        async with self._http.post(self.url, data=json.dumps(message), headers=self._headers) as response:
            body = await response.text()
            if response.status >= 400:
                raise McpError(f"HTTP {response.status} from {self.url}: {body[:300]}")
            return response, body

    async def _exchange(
        self, method: str, params: dict[str, Any]
    ) -> tuple[aiohttp.ClientResponse, dict[str, Any]]:
        request_id = next(self._ids)
        response, body = await self._post(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        return response, answer(response.headers.get("content-type", ""), body, request_id)

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
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool; the text of its result (raises on an error result)."""
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        if result.get("isError"):
            raise McpError(f"{name} failed: {text[:300]}")
        return text

    async def close(self) -> None:
        """End the session (DELETE) and the connection."""
        if "mcp-session-id" in self._headers:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):  # a stopping server need not answer
                timeout = aiohttp.ClientTimeout(total=2)
                async with self._http.delete(self.url, headers=self._headers, timeout=timeout):
                    pass
        await self._http.close()

    async def __aenter__(self) -> Self:
        try:
            return await self.open()
        except BaseException:
            await self._http.close()
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
