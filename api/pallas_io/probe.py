"""Checking an MCP endpoint against the contract: the one MCP probe of the product.

Used by an agent's `get_health` (is each downstream server up?), by the operator (verify an
agent: initialize + tools/list; then its `get_health`) and by the registry of `pallas run` (the
same for local agents). It speaks the few JSON-RPC requests it needs over plain HTTP rather than
through an MCP client session: the whole probe is a handful of requests under one deadline, it
costs little CPU (agents run it for every `get_health`), and its failures can be named precisely
(`HTTP 503`, `connection refused`, `not an MCP server`).

Streamable HTTP: POST `initialize` (the one request that needs no session), expect HTTP 200 with
an initialize result as JSON or as an SSE event; then, when asked, `notifications/initialized`,
`tools/list` (every page) and `tools/call get_health` on that session; finally DELETE the
session, best effort. SSE transport (legacy): open the event stream and expect its `endpoint`
event. Never raises: a failure is an outcome with a short reason and no header values.

An endpoint that asks for a bearer (MCP authorization: 401 with `WWW-Authenticate: Bearer`)
fails with `unauthorized` set and the challenge's `resource_metadata` URL, so a caller without a
token can still tell "serving, wants a token" from "broken"; a JSON error body's
`error_description` (a 403 or a 503 of the agent's access checks) is part of the reason.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2

from pallas_api.health import HealthReport, HealthReportError

Transport = Literal["streamable-http", "sse"]
PROTOCOL_VERSION = "2025-11-25"
MAX_BODY = 4 * 1024 * 1024
MAX_TOOLS = 1000
NOT_MCP = "not an MCP server (no initialize result)"
_ACCEPT_BOTH = "application/json, text/event-stream"
_RESOURCE_METADATA = re.compile(r'resource_metadata="([^"]+)"')
MAX_ERROR_BODY = 4096


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """What the server said about itself in the initialize handshake."""

    name: str
    version: str = ""
    protocol_version: str = ""


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one probe found. `ok` is about the endpoint; the health call has its own verdict."""

    ok: bool
    message: str = ""
    """Why the endpoint failed: `timed out after 3s`, `HTTP 503`, `connection refused`…"""
    server: ServerIdentity | None = None
    tools: tuple[str, ...] = ()
    health: HealthReport | None = None
    """The `get_health` report, when asked for and readable."""
    health_problem: str = ""
    """Why no report came back when one was asked for."""
    unauthorized: bool = False
    """The endpoint answered 401 with a Bearer challenge: it serves, and wants a token."""
    resource_metadata: str = ""
    """The challenge's RFC 9728 metadata URL, when it named one."""
    status: int | None = None
    """The HTTP status of a refusal (401, 503…), when the endpoint answered with one."""


class _ProbeFailed(Exception):
    """A step failed; the message is the outcome's reason."""

    def __init__(
        self,
        message: str,
        *,
        unauthorized: bool = False,
        resource_metadata: str = "",
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.unauthorized = unauthorized
        self.resource_metadata = resource_metadata
        self.status = status


async def _refusal(response: httpx2.Response) -> _ProbeFailed:
    """The failure a non-200 answer stands for: its status, what the server said, its challenge."""
    reason = f"HTTP {response.status_code}"
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ERROR_BODY:
            break
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        error = json.loads(body)
        described = error.get("error_description") if isinstance(error, dict) else None
        if isinstance(described, str) and described:
            reason += f": {described[:200]}"
    challenge = response.headers.get("www-authenticate", "")
    unauthorized = response.status_code == 401 and challenge.lower().startswith("bearer")
    found = _RESOURCE_METADATA.search(challenge) if unauthorized else None
    return _ProbeFailed(
        reason,
        unauthorized=unauthorized,
        resource_metadata=found.group(1) if found else "",
        status=response.status_code,
    )


def leaf_exceptions(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, depth first; `exc` itself otherwise."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaf_exceptions(inner)
    else:
        yield exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def describe_transport_failure(exc: BaseException) -> str | None:
    """A short reason for a failed HTTP exchange, or None when `exc` is not a transport failure.

    No stack trace and no header values: the reason is shown to users and in health reports.
    """
    root = next(leaf_exceptions(exc))
    for link in _chain(root):
        if isinstance(link, ConnectionRefusedError):
            return "connection refused"
        if isinstance(link, socket.gaierror):
            return "cannot resolve host"
        if isinstance(link, ssl.SSLError):
            return "TLS handshake failed"
    if isinstance(root, httpx2.HTTPStatusError):
        return f"HTTP {root.response.status_code}"
    if isinstance(root, httpx2.TimeoutException | TimeoutError):
        return "timed out"
    if isinstance(root, httpx2.ConnectError):
        return "cannot connect"
    if isinstance(root, httpx2.RemoteProtocolError | httpx2.ReadError | httpx2.WriteError):
        return "connection lost"
    if isinstance(root, httpx2.HTTPError | OSError):
        return f"transport error ({type(root).__name__})"
    return None


async def _messages(response: httpx2.Response) -> list[Any]:
    """The JSON-RPC messages of a JSON body, or of an SSE stream up to the first response."""
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith("application/json"):
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_BODY:
                raise _ProbeFailed(f"answer larger than {MAX_BODY // (1024 * 1024)} MiB")
        message = json.loads(body)
        return message if isinstance(message, list) else [message]
    if content_type.startswith("text/event-stream"):
        out: list[Any] = []
        data: list[str] = []
        size = 0
        async for line in response.aiter_lines():
            size += len(line)
            if size > MAX_BODY:
                raise _ProbeFailed(f"answer larger than {MAX_BODY // (1024 * 1024)} MiB")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line:
                # End of an event. One without data is a resumability "priming" event: skip it.
                if "".join(data).strip():
                    message = json.loads("\n".join(data))
                    out.append(message)
                    if isinstance(message, dict) and ("result" in message or "error" in message):
                        return out
                data = []
        return out
    return []


@dataclass
class _Session:
    client: httpx2.AsyncClient
    url: str
    headers: dict[str, str]
    session_id: str | None = None
    version: str | None = None
    next_id: int = 1
    identity: ServerIdentity | None = field(default=None)

    def _request_headers(self) -> dict[str, str]:
        out = {**self.headers, "Accept": _ACCEPT_BOTH, "Content-Type": "application/json"}
        if self.session_id:
            out["Mcp-Session-Id"] = self.session_id
        if self.version:
            out["MCP-Protocol-Version"] = self.version
        return out

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send one request; its result, or `_ProbeFailed` naming what went wrong."""
        request_id = self.next_id
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        async with self.client.stream(
            "POST", self.url, json=body, headers=self._request_headers()
        ) as response:
            if response.status_code != 200:
                raise await _refusal(response)
            if method == "initialize":
                self.session_id = response.headers.get("mcp-session-id")
            try:
                messages = await _messages(response)
            except (ValueError, UnicodeDecodeError):
                raise _ProbeFailed(NOT_MCP if method == "initialize" else f"{method}: not JSON-RPC") from None
        answer = next(
            (m for m in messages if isinstance(m, dict) and m.get("id") == request_id),
            None,
        )
        if answer is None:
            raise _ProbeFailed(NOT_MCP if method == "initialize" else f"{method}: no answer")
        error = answer.get("error")
        if isinstance(error, dict):
            raise _ProbeFailed(f"{method} failed: {str(error.get('message', ''))[:200]}")
        return answer.get("result")

    async def notify(self, method: str) -> None:
        body = {"jsonrpc": "2.0", "method": method}
        response = await self.client.post(self.url, json=body, headers=self._request_headers())
        if response.status_code >= 400:
            raise _ProbeFailed(f"{method}: HTTP {response.status_code}")

    async def initialize(self) -> ServerIdentity:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pallas-probe", "version": "1"},
            },
        )
        if not isinstance(result, dict) or "protocolVersion" not in result:
            raise _ProbeFailed(NOT_MCP)
        self.version = str(result["protocolVersion"])
        raw_info = result.get("serverInfo")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        self.identity = ServerIdentity(
            name=str(info.get("name", "")),
            version=str(info.get("version", "")),
            protocol_version=self.version,
        )
        return self.identity

    async def list_tools(self) -> tuple[str, ...]:
        names: list[str] = []
        cursor: str | None = None
        while True:
            result = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools = result.get("tools") if isinstance(result, dict) else None
            if not isinstance(tools, list):
                raise _ProbeFailed("tools/list: no tools in the answer")
            names += [str(t["name"]) for t in tools if isinstance(t, dict) and "name" in t]
            cursor = result.get("nextCursor")
            if not cursor or len(names) >= MAX_TOOLS:
                return tuple(sorted(set(names)))

    async def get_health(self) -> HealthReport:
        result = await self.request("tools/call", {"name": "get_health", "arguments": {}})
        blocks = result.get("content") if isinstance(result, dict) else None
        texts = [b.get("text", "") for b in blocks or [] if isinstance(b, dict) and b.get("type") == "text"]
        if isinstance(result, dict) and result.get("isError"):
            raise HealthReportError(("get_health failed: " + " ".join(texts))[:300])
        return HealthReport.parse(texts[0] if texts else "")

    async def end(self) -> None:
        if self.session_id is None:
            return
        # Best effort: the server drops idle sessions on its own.
        with contextlib.suppress(httpx2.HTTPError):
            await self.client.delete(self.url, headers=self._request_headers())


async def _open_event_stream(client: httpx2.AsyncClient, url: str, headers: Mapping[str, str]) -> None:
    request_headers = {**headers, "Accept": "text/event-stream"}
    async with client.stream("GET", url, headers=request_headers) as response:
        if response.status_code != 200:
            raise await _refusal(response)
        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            raise _ProbeFailed("not an MCP SSE endpoint (no event stream)")
        async for line in response.aiter_lines():
            if line.startswith("event:") and line[6:].strip() == "endpoint":
                return
    raise _ProbeFailed("not an MCP SSE endpoint (no endpoint event)")


async def probe(
    url: str,
    *,
    time_limit: float,
    transport: Transport = "streamable-http",
    headers: Mapping[str, str] | None = None,
    list_tools: bool = False,
    get_health: bool = False,
    verify: ssl.SSLContext | bool = True,
    connections: httpx2.AsyncBaseTransport | None = None,
) -> ProbeOutcome:
    """Probe one MCP endpoint within `time_limit` seconds in all (the DELETE included); never raises.

    Args:
        url: The MCP endpoint (Streamable HTTP) or the SSE endpoint.
        time_limit: Seconds for the whole probe.
        transport: How the endpoint speaks MCP. `list_tools` and `get_health` need streamable-http.
        headers: Headers for every request (already resolved values; never logged).
        list_tools: Also list the tools (every page).
        get_health: Also call the `get_health` tool and read its report.
        verify: TLS verification (a shared SSL context saves building one per probe).
        connections: An HTTP transport to send through (e.g. over a pool of keep-alive
            connections the caller owns; `verify` is then the transport's business); by default
            the probe opens connections of its own and closes them.
    """
    deadline = anyio.current_time() + time_limit
    session: _Session | None = None
    outcome: ProbeOutcome | None = None
    try:
        async with httpx2.AsyncClient(
            timeout=httpx2.Timeout(time_limit), verify=verify, transport=connections
        ) as client:
            with anyio.move_on_at(deadline):
                if transport == "sse":
                    await _open_event_stream(client, url, headers or {})
                    outcome = ProbeOutcome(ok=True)
                else:
                    session = _Session(client, url, dict(headers or {}))
                    outcome = await _converse(session, list_tools, get_health)
            if session is not None and session.session_id is not None:
                with anyio.move_on_at(deadline):  # whatever time is left; an unfinished DELETE is fine
                    await session.end()
    except _ProbeFailed as exc:
        return _failed(session, str(exc), exc)
    except Exception as exc:  # noqa: BLE001 - a failure here must not end the caller
        return _failed(session, describe_transport_failure(exc) or f"unexpected {type(exc).__name__}")
    if outcome is None:
        return _failed(session, f"timed out after {time_limit:g}s")
    return outcome


def _failed(session: _Session | None, message: str, cause: _ProbeFailed | None = None) -> ProbeOutcome:
    identity = session.identity if session is not None else None
    return ProbeOutcome(
        ok=False,
        message=message,
        server=identity,
        unauthorized=cause is not None and cause.unauthorized,
        resource_metadata=cause.resource_metadata if cause is not None else "",
        status=cause.status if cause is not None else None,
    )


async def _converse(session: _Session, list_tools: bool, get_health: bool) -> ProbeOutcome:
    identity = await session.initialize()
    if not (list_tools or get_health):
        return ProbeOutcome(ok=True, server=identity)
    await session.notify("notifications/initialized")
    tools = await session.list_tools() if list_tools else ()
    if not get_health:
        return ProbeOutcome(ok=True, server=identity, tools=tools)
    try:
        report = await session.get_health()
    except (_ProbeFailed, HealthReportError) as exc:
        return ProbeOutcome(ok=True, server=identity, tools=tools, health_problem=str(exc))
    return ProbeOutcome(ok=True, server=identity, tools=tools, health=report)


@dataclass(frozen=True, slots=True)
class ResourceMetadata:
    """What an endpoint's RFC 9728 protected-resource metadata says (or why it could not be read)."""

    ok: bool
    message: str = ""
    resource: str = ""
    authorization_servers: tuple[str, ...] = ()


def metadata_url(mcp_url: str) -> str:
    """The root RFC 9728 metadata URL of the server an MCP endpoint belongs to."""
    parts = urlsplit(mcp_url)
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource"


async def resource_metadata(mcp_url: str, *, time_limit: float) -> ResourceMetadata:
    """Read the protected-resource metadata of the server serving `mcp_url`; never raises."""
    url = metadata_url(mcp_url)
    try:
        with anyio.fail_after(time_limit):
            async with httpx2.AsyncClient(timeout=httpx2.Timeout(time_limit)) as client:
                response = await client.get(url, headers={"Accept": "application/json"})
        if response.status_code != 200:
            return ResourceMetadata(False, f"{url}: HTTP {response.status_code}")
        document = response.json()
    except TimeoutError:
        return ResourceMetadata(False, f"{url}: timed out after {time_limit:g}s")
    except ValueError:
        return ResourceMetadata(False, f"{url}: not JSON")
    except Exception as exc:  # noqa: BLE001 - a failure here must not end the caller
        return ResourceMetadata(False, f"{url}: {describe_transport_failure(exc) or type(exc).__name__}")
    servers = document.get("authorization_servers") if isinstance(document, dict) else None
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        return ResourceMetadata(False, f"{url}: no authorization_servers")
    return ResourceMetadata(
        True, resource=str(document.get("resource", "")), authorization_servers=tuple(servers)
    )
