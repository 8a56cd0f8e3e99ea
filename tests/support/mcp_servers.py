"""Small real MCP servers on 127.0.0.1 for tests: fastmcp apps served by uvicorn on free ports.

Every server is an async context manager yielding a `RunningServer` (its URL and the HTTP requests
it received), and stops when the block ends:

    async with header_echo_server() as srv:
        source = McpServerSource(DownstreamServer(name="echo", url=srv.url), probe_timeout=1)

`serve(mcp)` runs any FastMCP instance the same way; `transport="sse"` serves fastmcp's legacy SSE
transport (the URL then points at the SSE endpoint). The probe helpers at the end are not MCP
servers: one never answers, one answers every request with a fixed HTTP status; the last lists
its tools as a real server does, then answers every tools/call with HTTP 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import get_http_headers
from fastmcp.tools import Tool, ToolResult
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from pallas_api.errors import ErrorCode
from pallas_runtime.server.tool_errors import error_result

LOOPBACK = "127.0.0.1"
# A 1x1 transparent PNG.
TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
"""An MCP `initialize` request, for tests that speak raw HTTP to an agent."""


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request a test server received (header names lower-case)."""

    method: str
    path: str
    headers: dict[str, str]
    client_port: int | None = None
    """The client's TCP port: which connection the request came over."""


@dataclass
class RunningServer:
    """A test server that is listening now."""

    url: str
    port: int
    requests: list[RecordedRequest] = field(default_factory=list)

    def received(self, method: str) -> list[RecordedRequest]:
        """The requests with this HTTP method, in arrival order."""
        return [r for r in self.requests if r.method == method]


class _Recorder:
    """ASGI middleware that notes every HTTP request before the app sees it."""

    def __init__(self, app: ASGIApp, log: list[RecordedRequest]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            client = scope.get("client")
            port = client[1] if client else None
            self.log.append(RecordedRequest(scope["method"], scope["path"], headers, port))
        await self.app(scope, receive, send)


def bound_socket(port: int = 0, host: str = LOOPBACK) -> socket.socket:
    """A listening-ready TCP socket on 127.0.0.1, or `host` (`port=0` picks a free port)."""
    # IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (no delayed-ACK stalls).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


@contextlib.asynccontextmanager
async def serve_app(
    app: ASGIApp,
    *,
    path: str = "/mcp",
    port: int = 0,
    host: str = LOOPBACK,
    sock: socket.socket | None = None,
) -> AsyncIterator[RunningServer]:
    """Serve an ASGI app with uvicorn on 127.0.0.1 (or `host`: pods reach the node's bridge
    address) until the block ends.

    `sock` is a socket from `bound_socket()` to serve on, for servers whose URLs must be known
    before any of them is built (agents that call each other); it is closed at the end.
    """
    sock = sock or bound_socket(port, host)
    host, actual_port = sock.getsockname()[:2]
    running = RunningServer(url=f"http://{host}:{actual_port}{path}", port=actual_port)
    config = uvicorn.Config(
        _Recorder(app, running.requests),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Clients under test may still hold an SSE stream open; do not wait for them forever.
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield running
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def serve(
    mcp: FastMCP,
    *,
    transport: Literal["streamable-http", "sse"] = "streamable-http",
    stateless: bool = False,
    port: int = 0,
    host: str = LOOPBACK,
) -> AsyncIterator[RunningServer]:
    """Serve a FastMCP instance over Streamable HTTP (`/mcp`) or SSE (`/sse`) on 127.0.0.1."""
    if transport == "sse":
        app = mcp.http_app(path="/sse", transport="sse")
        path = "/sse"
    else:
        app = mcp.http_app(path="/mcp", stateless_http=stateless)
        path = "/mcp"
    async with serve_app(app, path=path, port=port, host=host) as running:
        yield running


def header_echo_mcp(auth: StaticTokenVerifier | None = None) -> FastMCP:
    """Tool `echo_headers`: returns JSON {authorization, x_api_key} as seen on the tools/call request."""
    mcp = FastMCP("header-echo", auth=auth)

    @mcp.tool(output_schema=None)
    async def echo_headers(delay: float = 0.02) -> str:
        """Report the credential headers of this request (a short sleep makes concurrent calls overlap)."""
        await asyncio.sleep(delay)
        seen = get_http_headers(include={"authorization", "x-api-key"})
        return json.dumps({"authorization": seen.get("authorization"), "x_api_key": seen.get("x-api-key")})

    return mcp


def bearer_echo_mcp(tokens: tuple[str, ...] = ("Bearer caller-token",)) -> FastMCP:
    """`header_echo_mcp` behind a bearer check: only the given `Authorization` values get in.

    Anything else, a request without a bearer included (initialize too), gets fastmcp's 401
    with a `WWW-Authenticate: Bearer` challenge, as an MCP server that checks callers answers.
    """
    known = {t.removeprefix("Bearer "): {"client_id": f"c{i}", "scopes": []} for i, t in enumerate(tokens)}
    return header_echo_mcp(auth=StaticTokenVerifier(known))


def slow_mcp() -> FastMCP:
    """Tool `sleep(seconds)`: answers after sleeping."""
    mcp = FastMCP("slow")

    @mcp.tool(output_schema=None)
    async def sleep(seconds: float) -> str:
        """Sleep, then say so."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}s"

    return mcp


def progress_mcp() -> FastMCP:
    """Tool `work`: reports progress 1/3, 2/3, 3/3 (when the caller asked for progress), then returns."""
    mcp = FastMCP("progress")

    @mcp.tool(output_schema=None)
    async def work(ctx: Context) -> str:
        """Three steps with progress."""
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3, f"step {step}")
            await asyncio.sleep(0.01)
        return "worked"

    return mcp


def image_mcp() -> FastMCP:
    """Tool `picture`: a caption and a 1x1 PNG; tool `media`: audio, a link, structuredContent."""
    mcp = FastMCP("image")

    @mcp.tool(output_schema=None)
    def media() -> ToolResult:
        """Audio and a resource link, with structured content."""
        return ToolResult(
            content=[
                mcp_types.AudioContent(type="audio", data="UklGRg==", mime_type="audio/wav"),
                mcp_types.ResourceLink(type="resource_link", uri="file:///report.pdf", name="report"),
            ],
            structured_content={"count": 2},
        )

    @mcp.tool(output_schema=None)
    def picture() -> ToolResult:
        """A tiny picture."""
        return ToolResult(
            content=[
                mcp_types.TextContent(type="text", text="a pixel"),
                mcp_types.ImageContent(type="image", data=TINY_PNG, mime_type="image/png"),
            ]
        )

    return mcp


def list_changed_mcp() -> FastMCP:
    """Tool `add_tool(name)`: registers a new tool `name` and sends notifications/tools/list_changed."""
    mcp = FastMCP("list-changed")

    @mcp.tool(output_schema=None)
    async def add_tool(name: str, ctx: Context) -> str:
        """Add a tool that answers with its own name."""

        def added() -> str:
            return name

        mcp.add_tool(Tool.from_function(added, name=name, description=f"added at runtime: {name}"))
        # fastmcp 4.1.2 does not announce added tools by itself.
        await ctx.send_notification(mcp_types.ToolListChangedNotification())
        return f"added {name}"

    return mcp


def error_mcp() -> FastMCP:
    """Tool `fail(message)`: raises ToolError, so the result has isError=true."""
    mcp = FastMCP("error")

    @mcp.tool(output_schema=None)
    def fail(message: str = "bad input") -> str:
        """Always fails."""
        raise ToolError(message)

    return mcp


def peer_agent_mcp(name: str = "peer", stopped: Callable[[], bool] = lambda: False) -> FastMCP:
    """A stand-in Pallas agent: `send_message(message)` echoes it with the Authorization it saw;
    `get_health` exists so tests can check that only `send_message` is offered.

    While `stopped()`, send_message answers as a stopping agent does a call after its drain: the
    agent's own `AGENT_SHUTTING_DOWN` error result, marked `"processed": false`.
    """
    mcp = FastMCP(name)

    @mcp.tool(output_schema=None)
    async def send_message(message: str) -> str | ToolResult:
        """Talk to the agent."""
        if stopped():
            refusal = f"agent {name} is shutting down; the message was not processed: send it again"
            return error_result(ErrorCode.AGENT_SHUTTING_DOWN, refusal, processed=False)
        await asyncio.sleep(0.02)
        auth = get_http_headers(include={"authorization"}).get("authorization")
        return json.dumps({"message": message, "authorization": auth})

    @mcp.tool(output_schema=None)
    def get_health() -> str:
        """Always fine."""
        return json.dumps({"status": "ok"})

    return mcp


class _WideTool(Tool):
    """One of the wide server's tools: answers with its name and its arguments."""

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(content=f"{self.name} ran with {json.dumps(arguments, sort_keys=True)}")


WIDE_FIELDS = 6
"""Properties per wide tool: with their descriptions about 450 tokens of schema each (bytes/3)."""


def wide_mcp(count: int = 500) -> FastMCP:
    """A server with `count` tools (`op_000`…), each with a realistic schema of ~450 tokens.

    500 of them are about 220k tokens of schemas: more than most context windows, as a few real
    MCP servers together can be.
    """
    mcp = FastMCP("wide")
    for i in range(count):
        properties = {
            f"field_{j}": {
                "type": "string",
                "description": f"Field {j} of operation {i:03d}: an identifier, a filter expression or a "
                "free-text note, as the operation's documentation describes in detail for each case.",
            }
            for j in range(WIDE_FIELDS)
        }
        mcp.add_tool(
            _WideTool(
                name=f"op_{i:03d}",
                description=f"Operation {i:03d} of the wide service: does one specific thing to the "
                "records it is given and reports what it changed.",
                parameters={"type": "object", "properties": properties, "required": ["field_0"]},
            )
        )
    return mcp


def session_counter_mcp() -> FastMCP:
    """A stateful server: `count()` adds one to a counter of the calling MCP session and returns
    `{"count": N, "authorization": ...}` (the header the call carried); each session starts at 0."""
    mcp = FastMCP("counter")
    counts: dict[str, int] = {}

    @mcp.tool(output_schema=None)
    def count(ctx: Context) -> str:
        """Count the calls of this session."""
        counts[ctx.session_id] = counts.get(ctx.session_id, 0) + 1
        auth = get_http_headers(include={"authorization"}).get("authorization")
        return json.dumps({"count": counts[ctx.session_id], "authorization": auth})

    return mcp


def _served(factory: Any) -> Any:
    @contextlib.asynccontextmanager
    async def run(**kwargs: Any) -> AsyncIterator[RunningServer]:
        async with serve(factory(), **kwargs) as running:
            yield running

    run.__doc__ = f"Serve {factory.__name__}() until the block ends; kwargs go to `serve`."
    return run


header_echo_server = _served(header_echo_mcp)
bearer_echo_server = _served(bearer_echo_mcp)
slow_server = _served(slow_mcp)
progress_server = _served(progress_mcp)
image_server = _served(image_mcp)
list_changed_server = _served(list_changed_mcp)
error_server = _served(error_mcp)
peer_agent_server = _served(peer_agent_mcp)
wide_server = _served(wide_mcp)
session_counter_server = _served(session_counter_mcp)


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[RunningServer]:
    """Accepts TCP connections and reads requests but never answers (a hung peer)."""
    connections: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    sock = bound_socket()
    server = await asyncio.start_server(hold, sock=sock)
    port = sock.getsockname()[1]
    try:
        yield RunningServer(url=f"http://{LOOPBACK}:{port}/mcp", port=port)
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def status_server(
    status: int, body: str = "", content_type: str = "text/plain"
) -> AsyncIterator[RunningServer]:
    """Answers every request with the same HTTP status and body (not an MCP server)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await Request(scope, receive).body()
        await Response(body, status_code=status, media_type=content_type)(scope, receive, send)

    async with serve_app(app) as running:
        yield running


async def read_body(receive: Receive) -> bytes:
    """The whole body of an ASGI HTTP request (middleware that must look at it first)."""
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the connection's own messages."""
    replayed = False

    async def again() -> Any:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


class _CallsFail:
    """ASGI middleware: an MCP server whose tools/call requests all get HTTP 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if json.loads(body or b"{}").get("method") == "tools/call":
            await Response("the tool broke the server", status_code=500)(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)


@contextlib.asynccontextmanager
async def failing_calls_server() -> AsyncIterator[RunningServer]:
    """header_echo_mcp() listing `echo_headers` normally; calling it gets HTTP 500."""
    async with serve_app(_CallsFail(header_echo_mcp().http_app(path="/mcp"))) as running:
        yield running
