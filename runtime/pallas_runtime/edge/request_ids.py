"""One request per JSON-RPC id in flight on an MCP session; a reused id is refused at once.

The MCP SDK's Streamable HTTP transport (mcp 2.3, `StreamableHTTPServerTransport`) keeps a
session's open POST streams in a dict keyed by the request id (`str(message.id)`), and its
dispatcher overwrites a duplicate on purpose ("duplicate ids blind-overwrite (v1/TS parity)",
`mcp/shared/jsonrpc_dispatcher.py`). A second request reusing an id still in flight took over
the first one's stream: the first answer went to the second POST, and the first POST was never
answered, its stream kept open by pings for ever. A careless client (a retry loop reusing its
ids) hung its own call.

`OneRequestPerId` remembers the ids of a session's requests whose POST is still open and
answers a request reusing one at once: HTTP 409 with a JSON-RPC `INVALID_REQUEST` error naming
the id, without passing it to the SDK, so the first request goes on undisturbed. It reads the
body of POSTs carrying an `Mcp-Session-Id` (at most `limit` bytes; a larger one goes to the SDK
unread, which refuses it) and passes everything else through untouched: sessionless
(2026-07-28) requests share no table in the SDK, and an `initialize` has no session yet.
An id counts as in flight until its POST's response ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from pallas_runtime.edge.request_limit import read_body, replaying, send_invalid_request

SESSION_HEADER = "mcp-session-id"
RequestKey = tuple[str, str]
"""(session id, request id as the SDK keys it: `str(id)`, so 1 and "1" are one id)."""


class OneRequestPerId:
    """ASGI wrapper of the MCP app: a request id reused while in flight on its session gets 409."""

    def __init__(self, app: ASGIApp, limit: int, on_refused: Callable[[], None]) -> None:
        self._app = app
        self._limit = limit
        self._on_refused = on_refused
        self._in_flight: set[RequestKey] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Track the request's id while its POST is open; refuse one whose id is taken."""
        session = _session_id(scope)
        if session is None:
            await self._app(scope, receive, send)
            return
        buffered, body = await read_body(receive, self._limit)
        replay = replaying(buffered, receive)
        request_id = _request_id(body) if body is not None else None
        if request_id is None:
            await self._app(scope, replay, send)
            return
        key = (session, str(request_id))
        if key in self._in_flight:
            self._on_refused()
            await _refuse(send, request_id)
            return
        self._in_flight.add(key)
        try:
            await self._app(scope, replay, send)
        finally:
            self._in_flight.discard(key)


def _session_id(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope.get("method") != "POST":
        return None
    return Headers(raw=list(scope.get("headers") or ())).get(SESSION_HEADER)


def _request_id(body: bytes) -> str | int | None:
    """The id of a JSON-RPC request; None for anything else."""
    try:
        message = json.loads(body)
    except ValueError:  # the SDK answers the parse error
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None  # a notification, or an id the SDK refuses anyway
    return request_id


async def _refuse(send: Send, request_id: str | int) -> None:
    text = (
        f"request id {json.dumps(request_id)} is already in flight on this session: give each request an id "
        "of its own (JSON-RPC 2.0), or wait for the answer to the first"
    )
    await send_invalid_request(send, 409, request_id, text)
