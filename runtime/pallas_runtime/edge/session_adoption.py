"""Taking on an MCP session another replica of the agent opened (a rollout, a drain, a lost node).

A Service spreads an agent's connections over its pods, and MCP clients open new connections in
the middle of a session (the MCP SDK's client uses one per request). When the pod that opened a
session leaves the Service's endpoints (a rollout, a drain, a scale-down), or once it has stopped,
the session's next request reaches another pod, which never had it: the MCP SDK answers 404, and
most clients (the MCP SDK's own) fail the call instead of starting a new session. The ids the SDK
issues are random (`uuid4().hex`) and nothing of a Pallas session lives only in its transport: a
conversation is keyed by the caller (and the session id for a `session`-scoped agent) in the
conversation store, which replicas share. So the pod the request reaches takes the session on:
it opens a session under the same id, ready at once (the handshake happened elsewhere), with the
protocol version the request names, bound to the credential the request carries, within the
table's caps like any new session.

What it does not take on: an id of another shape (not issued by an agent), one this process had
and closed (idle, evicted, deleted: those stay gone, or closing would mean nothing), a DELETE, and
anything while the table is closing its sessions (the end of a drain). A taken-on session does not
know the client's capabilities (they were declared in the handshake): it asks no elicitation or
sampling of the client, as for a client that declared none.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus
from cachetools import LRUCache
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

log = logging.getLogger("pallas.sessions")

ISSUED_ID = re.compile(r"[0-9a-f]{32}")
"""The shape of the session ids the MCP SDK issues (`uuid4().hex`): only these are taken on."""
ENDED_REMEMBERED = 10_000
"""How many ended session ids a process remembers (32 bytes each), so they stay ended here."""


class EndedSessions:
    """The ids of sessions this process had and closed, newest last (bounded)."""

    def __init__(self, size: int = ENDED_REMEMBERED) -> None:
        # Adding moves an id to the newest end and evicts the oldest; `in` moves nothing.
        self._ids: LRUCache[str, None] = LRUCache(maxsize=size)

    def add(self, session: str) -> None:
        """Remember `session` as ended (forgetting the oldest past the bound)."""
        self._ids[session] = None

    def __contains__(self, session: object) -> bool:
        return session in self._ids


def adoptable_protocol(scope: Scope, session: str, ended: EndedSessions) -> str | None:
    """The protocol version to take `session` on with, or None when this request must not.

    A POST or a GET (a notification stream) of the handshake era naming an id of the SDK's
    shape that this process never closed.
    """
    if scope.get("method") not in ("POST", "GET") or not ISSUED_ID.fullmatch(session) or session in ended:
        return None
    version = request_header(scope, "mcp-protocol-version")
    if version is None:
        return DEFAULT_NEGOTIATED_VERSION  # what the transport assumes of a request without it
    return version if version in HANDSHAKE_PROTOCOL_VERSIONS else None


async def start_taken_on(
    transport: StreamableHTTPServerTransport,
    protocol: str,
    *,
    server: Any,
    lifespan_state: Any,
    task_group: Any,
    discard: Callable[[], Awaitable[None]],
) -> None:
    """Start the taken-on session's message loop; return once its transport takes requests.

    The loop is the MCP SDK's (`serve_connection`) over a connection already initialized at
    `protocol`. `discard` ends the session when its loop ends (a DELETE, the idle timeout). The
    session is registered only after this returns: a request of it before that (the client's
    notification stream and a call at once) would reach a transport not yet connected.
    """
    session = transport.mcp_session_id

    async def run(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with transport.connect() as (read, write):
            task_status.started()
            try:
                idle = transport.idle_scope if transport.idle_scope is not None else anyio.CancelScope()
                with idle:
                    dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                        read, write, inline_methods=frozenset({"initialize"})
                    )
                    connection = Connection.for_loop(
                        dispatcher, session_id=session, protocol_version_hint=protocol
                    )
                    connection.initialized.set()  # the handshake happened on the replica that opened it
                    await serve_connection(
                        server, dispatcher, connection=connection, lifespan_state=lifespan_state
                    )
            except Exception:
                log.exception("a taken-on MCP session failed")
            finally:
                await discard()

    await task_group.start(run)


async def answer_taking_on(
    transport: StreamableHTTPServerTransport,
    *,
    abandon: Callable[[], Awaitable[None]],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> bool:
    """Answer the request that brought a taken-on session; whether it established the session.

    A request answered with an error (or not at all) leaves nothing behind: the session is
    abandoned (`abandon`), as the SDK discards an opening request that fails, and its id stays
    free to be taken on by the client's next request.
    """
    status = 0

    async def noted(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    established = False
    try:
        await transport.handle_request(scope, receive, noted)
        established = 0 < status < 400
    finally:
        if not established:
            await abandon()
    return established


def request_header(scope: Scope, name: str) -> str | None:
    """The value of the request's header `name` (its first), if it has one."""
    return Headers(raw=list(scope.get("headers") or ())).get(name)
