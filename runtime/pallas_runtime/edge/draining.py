"""A draining agent's edge: no new MCP sessions.

From SIGTERM until it stops, an agent lets the turns in flight finish (`AgentServer.drain`). Its
Service stops sending it new connections (the pod is terminating, and `/readyz` answers 503), but
that takes a moment to reach every node (the preStop pause covers it in a pod), and clients on
keep-alive connections still reach it. A request that would open a new MCP session (a POST to
`/mcp` without `Mcp-Session-Id`, in the handshake era of the protocol) is answered 503 with
`Retry-After` and a JSON-RPC error whose `data.code` is `AGENT_SHUTTING_DOWN` (retryable), before
anything reads it, and its connection is closed: the session would die with the process, and the
retry, on a new connection, reaches a ready replica.

Requests of open sessions are served, new turns included, whenever they reach the process (a
client mid-conversation, an orchestrator calling its peer): refusing them would fail a call the
process can still answer, and the drain bounds how long they can keep it. What reaches it: a
request on a connection it already has, and one racing the endpoint update. Every answer it gives
while draining closes its connection (`Connection: close`, as an HTTP server shutting down
gracefully does; `pallas_io.serving` also ends the responses in progress when the drain began
with their connections), so a client's pool of kept-alive connections empties of it one request at a
time: the next request goes over a new connection, which the Service sends to a ready replica;
that replica takes the session on (`session_adoption`; a server that does not answers 404 and
the client starts a new session, the MCP transport's rule). Without it a pooled connection kept
carrying requests here until the process was gone, each one failing then. Sessionless requests
(protocol 2026-07-28) are served too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types import ErrorData
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pallas_api.errors import DRAINING_RPC_CODE, ErrorCode

RETRY_AFTER_SECONDS = 1
"""What a refused client is told to wait: its retry goes over a new connection, to a ready replica."""


class DrainGuard:
    """While `draining()`: refuse requests that would open an MCP session."""

    def __init__(
        self,
        app: ASGIApp,
        agent: str,
        draining: Callable[[], bool],
        on_refused: Callable[[], None],
        path: str = "/mcp",
    ) -> None:
        self._app = app
        self._agent = agent
        self._draining = draining
        self._on_refused = on_refused
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it when it would open a session of a draining agent.

        While draining, what is passed on is answered with `Connection: close`.
        """
        if scope["type"] != "http" or not self._draining():
            await self._app(scope, receive, send)
            return
        if _opens_session(scope, self._path):
            self._on_refused()
            await self._refuse(send)
            return
        await self._app(scope, receive, _closing_connection(send))

    async def _refuse(self, send: Send) -> None:
        text = (
            f"agent {self._agent} is shutting down and takes no new sessions; "
            f"retry in {RETRY_AFTER_SECONDS}s (another replica, or this agent once it is back, takes it)"
        )
        data = {
            "code": ErrorCode.AGENT_SHUTTING_DOWN.value,
            "retryable": True,
            "retryAfterSeconds": RETRY_AFTER_SECONDS,
        }
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": DRAINING_RPC_CODE, "message": text, "data": data},
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _closing_connection(send: Send) -> Send:
    """`send`, with `Connection: close` added to the response's head (the server then closes it)."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing


def refusal_pause(error: ErrorData) -> float | None:
    """The wait a draining agent's refusal of a new session asks for (`Retry-After`), else None."""
    if error.code != DRAINING_RPC_CODE:
        return None
    data = error.data if isinstance(error.data, Mapping) else {}
    wait = data.get("retryAfterSeconds")
    return float(wait) if isinstance(wait, int | float) and wait >= 0 else float(RETRY_AFTER_SECONDS)


def _opens_session(scope: Scope, path: str) -> bool:
    """A POST to the MCP endpoint without a session, in the protocol's handshake era."""
    if scope.get("method") != "POST" or scope.get("path", "").rstrip("/") != path:
        return False
    headers = Headers(raw=list(scope.get("headers") or ()))
    version = headers.get("mcp-protocol-version")
    return MCP_SESSION_ID_HEADER not in headers and (
        version is None or version in HANDSHAKE_PROTOCOL_VERSIONS
    )
