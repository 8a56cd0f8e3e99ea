"""Requests too large for the MCP endpoint, refused with a JSON-RPC error that names the limit.

The MCP SDK refuses request bodies over 4 MiB with a bare `413` in plain text, which MCP clients
show as a transport failure and nobody counts. This ASGI wrapper answers first, for requests
that declare their size: the same 413, with a JSON-RPC error saying how large the request was
and what the limit is, and a count in `pallas_requests_refused_total`.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from pallas_runtime.sizes import MiB, human_bytes

MAX_REQUEST_BYTES = 4 * MiB
"""The MCP SDK's limit on one Streamable HTTP request body (not configurable through fastmcp)."""
INVALID_REQUEST = -32600


class RequestLimit:
    """Refuse POSTs whose Content-Length is over `limit` before the MCP app reads them."""

    def __init__(self, app: ASGIApp, limit: int, on_refused: Callable[[], None]) -> None:
        self._app = app
        self._limit = limit
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer an oversized POST here; pass everything else to the app."""
        if scope["type"] == "http" and scope.get("method") == "POST":
            size = _content_length(scope)
            if size is not None and size > self._limit:
                self._on_refused()
                await _refuse(send, size, self._limit)
                return
        await self._app(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, size: int, limit: int) -> None:
    message = (
        f"the request is {human_bytes(size)}; this agent accepts at most {human_bytes(limit)} per "
        "request (images count base64-encoded): send smaller or fewer images"
    )
    await send_invalid_request(send, 413, None, message)


async def send_invalid_request(send: Send, status: int, request_id: str | int | None, message: str) -> None:
    """Answer with HTTP `status` and a JSON-RPC `INVALID_REQUEST` error saying `message`."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": INVALID_REQUEST, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
