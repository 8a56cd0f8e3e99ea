"""The bridge: a stdio MCP server served over Streamable HTTP, so agents reach it by URL.

It is fastmcp's proxy (`create_proxy` / `FastMCPProxy`): tools, resources and prompts are listed
from the server and each request is relayed (progress, content of every type and `isError`
untouched), on a client transport that hands over the session `StdioServer` keeps. A stdio
server has one client, so:

- **shared** (default): one server for the bridge; every HTTP session's requests travel on its
  one MCP session. Whatever the server keeps per session is shared by all callers: that is
  what a server not marked `stateful` promises not to need.
- **stateful**: a server process per HTTP session, started with the session's first request and
  stopped when the session ends (DELETE, idle timeout, or room made for a newer one). The agents
  keep one HTTP session per caller conversation (`downstream.conversation_sessions`), so each
  conversation has a process of its own.

The bridge scrubs its server's Secret values (`pallas run`'s resolved `stdio.env` Secrets, a
pod's Secret volume) from every tool result, text and structured, as an agent scrubs its own
secrets: the agents using the server never knew those values, so they could not.

Only the deployment's agents are served: every request but the probes carries the deployment's
bridge credential (`pallas_runtime.stdio.credential`).

Sessions are kept by the agents' `SessionTable` within `max_sessions` and `idle_timeout_seconds`.
`/healthz` answers while the process serves; `/readyz` only once the shared server has a session
(stateful bridges start servers on demand and are ready at once). A hosted server's bridge reads
the pod's Secret volume every few seconds and restarts the server when a value changed: the
server's container reads its secret variables from those files when it starts
(`pallas_operator.builders.stdio`), so a rotated Secret reaches it without a new pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from fastmcp.client.transports import ClientTransport
from fastmcp.server import create_proxy
from fastmcp.server.dependencies import get_context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient, ProxyMetadataMiddleware
from fastmcp.tools import ToolResult
from mcp import ClientSession
from mcp_types import CallToolRequestParams, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp

from pallas_api.fields import SessionLimits
from pallas_io.logs import SecretValues
from pallas_io.secrets import SecretFiles
from pallas_runtime.edge.request_limit import MAX_REQUEST_BYTES, RequestLimit
from pallas_runtime.edge.sessions import serve_sessions
from pallas_runtime.stdio.credential import BridgeCredential
from pallas_runtime.stdio.links import Link
from pallas_runtime.stdio.supervisor import ServerUnavailable, StdioServer

log = logging.getLogger("pallas.stdio")

REQUEST_WAIT = 30.0
"""How long a request waits for a server that is (re)starting before it is answered with why not."""
SECRETS_POLL_SECONDS = 2.0
"""How often a hosted server's bridge reads its Secret volume for a rotated value."""


class SupervisedTransport(ClientTransport):
    """A fastmcp client transport over a `StdioServer`'s session (already initialized).

    The proxy makes a client per request; every one gets the server's current session, and
    closing a client leaves the server running (its lifetime is the bridge's or the HTTP
    session's, not a request's).
    """

    legacy_only = True  # a stdio server speaks the handshake era; the session is negotiated already

    def __init__(self, server: StdioServer, wait: float = REQUEST_WAIT) -> None:
        self._server = server
        self._wait = wait

    @contextlib.asynccontextmanager
    async def connect_session(self, **_: Any) -> AsyncIterator[ClientSession]:
        """The server's session, waiting (up to the transport's wait) while it (re)starts.

        Raises:
            ServerUnavailable: the server has no session within the wait.
        """
        yield await self._server.session(self._wait)


class ScrubSecrets(Middleware):
    """Replaces the server's secret values by `[redacted]` in its tool results."""

    def __init__(self, values: Callable[[], SecretValues]) -> None:
        self._values = values

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        """The result with every secret value replaced, in its text and its structured content."""
        result = await call_next(context)
        secrets = self._values()  # read now: a pod's Secret may have been rotated
        if not secrets:
            return result
        content = [
            block.model_copy(update={"text": secrets.scrub(block.text)})
            if isinstance(block, TextContent)
            else block
            for block in result.content
        ]
        structured = _scrubbed(result.structured_content, secrets)
        return ToolResult(content=content, structured_content=structured, meta=result.meta)


def _scrubbed(value: Any, secrets: SecretValues) -> Any:
    if isinstance(value, str):
        return secrets.scrub(value)
    if isinstance(value, dict):
        return {k: _scrubbed(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, secrets) for v in value]
    return value


class Bridge:
    """One stdio server (or one per HTTP session) behind a Streamable HTTP endpoint at `/mcp`."""

    def __init__(
        self,
        name: str,
        link: Callable[[], Link],
        *,
        token: Callable[[], str],
        stateful: bool = False,
        limits: SessionLimits | None = None,
        secrets_dir: Path | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        """Describe the bridge; nothing starts before its app's lifespan.

        Args:
            name: The server's name (the `mcpServers` key): log lines and the proxy's name.
            link: Makes the link of one server (called once, or once per HTTP session if stateful).
            token: Gives the deployment's bridge credential now: every request but the probes
                must carry it (`BridgeCredential`).
            stateful: A server per HTTP session instead of one for all.
            limits: The HTTP sessions kept (`maxSessions`, idle timeout); the agents' defaults if None.
            secrets_dir: The Secret volume the server's container reads its secret variables from
                when it starts (a hosted server's pod): when a file in it changes, the server's
                life is ended so that it starts again with the new values.
            secrets: The server's secret values known beforehand (`pallas run`'s resolved
                Secrets); with `secrets_dir`'s, scrubbed from every tool result.
        """
        self.name = name
        self._link = link
        self._token = token
        self.stateful = stateful
        self.limits = limits or SessionLimits()
        self.shared: StdioServer | None = None if stateful else StdioServer(name, link())
        self._secrets_dir = secrets_dir
        self._per_session: dict[object, StdioServer] = {}
        self._serving_sessions: set[str] = set()
        """The MCP session IDs whose own server was started (the others hold nothing)."""
        if stateful:
            self.mcp: FastMCP = FastMCPProxy(client_factory=self._session_client, name=name)
            # It would start a server to copy its instructions into every `initialize` answer: a
            # process per health probe. A session's server starts with its first real request.
            self.mcp.middleware = [
                m for m in self.mcp.middleware if not isinstance(m, ProxyMetadataMiddleware)
            ]
        else:
            self.mcp = create_proxy(SupervisedTransport(self._shared_server()), name=name)
        self._secrets = tuple(secrets)
        self.mcp.add_middleware(ScrubSecrets(self._secret_values))

    def _secret_values(self) -> SecretValues:
        from_volume = SecretFiles(self._secrets_dir).values() if self._secrets_dir is not None else ()
        return SecretValues([*self._secrets, *from_volume])

    def _shared_server(self) -> StdioServer:
        if self.shared is None:  # pragma: no cover - only a shared bridge has one
            raise AssertionError("a stateful bridge has no shared server")
        return self.shared

    @property
    def sessions(self) -> int:
        """Servers running for HTTP sessions now (stateful bridges)."""
        return len(self._per_session)

    def _session_client(self) -> ProxyClient[SupervisedTransport]:
        """The client of the current HTTP session's own server, started with its first request."""
        connection = getattr(get_context().session, "_connection", None)
        if connection is None:
            raise ServerUnavailable(f"stdio server {self.name} is stateful: a request needs an MCP session")
        server = self._per_session.get(connection)
        if server is None:
            server = self._per_session[connection] = StdioServer(self.name, self._link())
            session_id = get_context().session_id
            self._serving_sessions.add(session_id)
            server.start()
            log.info("%s: a server for a new session (%d running)", self.name, len(self._per_session))

            async def session_ended() -> None:
                self._per_session.pop(connection, None)
                self._serving_sessions.discard(session_id)
                await server.aclose()
                log.info("%s: the session's server stopped (%d running)", self.name, len(self._per_session))

            connection.exit_stack.push_async_callback(session_ended)
        return ProxyClient(SupervisedTransport(server))

    def _holds_nothing(self, session_id: str) -> bool:
        return self.stateful and session_id not in self._serving_sessions

    @property
    def ready(self) -> bool:
        """Whether requests can be served now: the shared server is up (stateful: always)."""
        return self.shared is None or self.shared.ready

    def app(self) -> ASGIApp:
        """The bridge's HTTP app: `/mcp`, `/healthz`, `/readyz`; its lifespan runs the server(s).

        Request bodies are bounded as the agent's are (`RequestLimit`): the MCP SDK would read a
        chunked body whole before refusing it. Requests without the deployment's credential are
        refused before they reach the server (`BridgeCredential`).
        """
        app = self.mcp.http_app(path="/mcp", host_origin_protection="auto")

        async def healthz(_: Request) -> PlainTextResponse:
            return PlainTextResponse("ok")

        async def readyz(_: Request) -> PlainTextResponse:
            if self.ready:
                return PlainTextResponse("ready")
            problem = self.shared.last_problem if self.shared is not None else ""
            return PlainTextResponse(f"not ready: {problem}", status_code=503)

        app.add_route("/healthz", healthz)
        app.add_route("/readyz", readyz)
        # A session whose server never started (a health probe's, its DELETE cut off by its time
        # limit) is closed first to make room, before any session running a server.
        serve_sessions(app, self.mcp, self.limits, holds_nothing=self._holds_nothing)
        sessions_lifespan = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(starlette: Starlette) -> AsyncIterator[None]:
            watching: asyncio.Task[None] | None = None
            if self.shared is not None:
                self.shared.start()
                if self._secrets_dir is not None:
                    watching = asyncio.create_task(_renew_on_change(self.shared, self._secrets_dir))
            try:
                async with sessions_lifespan(starlette):
                    yield
            finally:
                if watching is not None:
                    watching.cancel()
                await self.aclose()

        app.router.lifespan_context = lifespan
        guarded = BridgeCredential(app, self._token)
        return RequestLimit(guarded, MAX_REQUEST_BYTES, lambda: None)  # the bridge keeps no metrics

    async def aclose(self) -> None:
        """Stop every server the bridge runs."""
        servers = [*([self.shared] if self.shared is not None else []), *self._per_session.values()]
        self._per_session.clear()
        for server in servers:
            await server.aclose()


async def _renew_on_change(server: StdioServer, directory: Path) -> None:
    """Renew `server` whenever the files of `directory` (its Secret volume) change.

    Read every `SECRETS_POLL_SECONDS`: a few small files on a tmpfs, as `pallas_io.secrets`
    reads them, and the kubelet swaps a new version in at once (`..data`), so a read sees the old
    values or the new ones.
    """
    seen = dict(SecretFiles(directory))
    while True:
        await asyncio.sleep(SECRETS_POLL_SECONDS)
        now = dict(SecretFiles(directory))
        if now != seen:
            changed = sorted(set(now) ^ set(seen) | {k for k in now if k in seen and now[k] != seen[k]})
            seen = now
            log.info("%s: secrets changed (%s); restarting the server", server.name, ", ".join(changed))
            server.renew(f"its secrets changed ({', '.join(changed)})")
