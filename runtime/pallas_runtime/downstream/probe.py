"""The health probe of one downstream endpoint (used by `get_health`).

Streamable HTTP: POST a JSON-RPC `initialize` (the one MCP request that needs no session) and
expect HTTP 200 carrying an initialize result, as JSON or as the first SSE event; then end the
session the server opened with a DELETE, best effort. SSE transport: open the event stream and
expect its `endpoint` event. Raw httpx2 rather than the SDK, so that the whole probe is a handful
of requests bounded by one deadline and its failures can be named precisely.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import anyio
import httpx2

from pallas_runtime import __version__
from pallas_runtime.downstream.connection import Transport, tls_context
from pallas_runtime.downstream.failures import describe_failure
from pallas_runtime.downstream.source import ProbeResult

PROTOCOL_VERSION = "2025-11-25"
MAX_BODY = 1024 * 1024
NOT_MCP = "not an MCP server (no initialize result)"
_ACCEPT_BOTH = "application/json, text/event-stream"


def _initialize_request() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "pallas-health", "version": __version__},
        },
    }


async def _first_message(response: httpx2.Response) -> Any:
    """The JSON-RPC message of a JSON body or of the first SSE `data:` event; None if neither."""
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith("application/json"):
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_BODY:
                return None
        return json.loads(body)
    if content_type.startswith("text/event-stream"):
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line:
                # End of an event. One without data is a resumability "priming" event: skip it.
                if "".join(data).strip():
                    return json.loads("\n".join(data))
                data = []
        return None
    return None


async def _initialize(
    client: httpx2.AsyncClient, url: str, headers: Mapping[str, str]
) -> tuple[str, str | None, str | None]:
    """(failure message or "", session id, negotiated protocol version)."""
    request_headers = {**headers, "Accept": _ACCEPT_BOTH, "Content-Type": "application/json"}
    async with client.stream("POST", url, json=_initialize_request(), headers=request_headers) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}", None, None
        session_id = response.headers.get("mcp-session-id")
        try:
            message = await _first_message(response)
        except (ValueError, UnicodeDecodeError):
            return NOT_MCP, session_id, None
    if not isinstance(message, dict):
        return NOT_MCP, session_id, None
    error = message.get("error")
    if isinstance(error, dict):
        return f"initialize failed: {str(error.get('message', ''))[:200]}", session_id, None
    result = message.get("result")
    if not isinstance(result, dict) or "protocolVersion" not in result:
        return NOT_MCP, session_id, None
    return "", session_id, str(result["protocolVersion"])


async def _end_session(
    client: httpx2.AsyncClient, url: str, headers: Mapping[str, str], session_id: str, version: str | None
) -> None:
    extra = {"Mcp-Session-Id": session_id}
    if version:
        extra["MCP-Protocol-Version"] = version
    # Best effort: the server drops idle sessions on its own.
    with contextlib.suppress(httpx2.HTTPError):
        await client.delete(url, headers={**headers, **extra})


async def _open_event_stream(client: httpx2.AsyncClient, url: str, headers: Mapping[str, str]) -> str:
    """Failure message or "" once the SSE endpoint has sent its `endpoint` event."""
    request_headers = {**headers, "Accept": "text/event-stream"}
    async with client.stream("GET", url, headers=request_headers) as response:
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return "not an MCP SSE endpoint (no event stream)"
        async for line in response.aiter_lines():
            if line.startswith("event:") and line[6:].strip() == "endpoint":
                return ""
    return "not an MCP SSE endpoint (no endpoint event)"


async def probe_endpoint(
    source: str, url: str, transport: Transport, headers: Mapping[str, str], *, budget: float
) -> ProbeResult:
    """Probe one endpoint within `budget` seconds in all; never raises.

    Args:
        source: The server's or agent's name, copied into the result.
        url: The MCP endpoint (Streamable HTTP) or the SSE endpoint.
        transport: How the endpoint speaks MCP.
        headers: The configured headers (already resolved); never a forwarded bearer.
        budget: The probe's whole time budget in seconds, DELETE included.

    Returns:
        ok, or not ok with a short reason such as `timed out after 3s`, `connection refused`,
        `HTTP 503` or `not an MCP server (no initialize result)`.
    """
    deadline = anyio.current_time() + budget
    failure: str | None = None
    session_id: str | None = None
    version: str | None = None
    try:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(budget), verify=tls_context()) as client:
            with anyio.move_on_at(deadline):
                if transport == "sse":
                    failure = await _open_event_stream(client, url, headers)
                else:
                    failure, session_id, version = await _initialize(client, url, headers)
            if session_id is not None:
                # Whatever time is left; a DELETE that does not finish does not fail the probe.
                with anyio.move_on_at(deadline):
                    await _end_session(client, url, headers, session_id, version)
    except Exception as exc:
        return ProbeResult(source=source, ok=False, message=describe_failure(exc))
    if failure is None:
        return ProbeResult(source=source, ok=False, message=f"timed out after {budget:g}s")
    return ProbeResult(source=source, ok=not failure, message=failure)
