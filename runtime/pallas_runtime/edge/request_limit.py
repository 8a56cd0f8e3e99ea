"""Request bodies over the limit, refused with a JSON-RPC error that names the limit, on every route.

The MCP SDK refuses request bodies over 4 MiB with a bare `413` in plain text, which MCP clients
show as a transport failure and nobody counts, and only after reading the whole body; the A2A
endpoint (a2a-sdk) reads any body whole. This ASGI wrapper answers first, for every route: a
request declaring a `Content-Length` over the limit is refused unread (the server reads no more
than a declared length), and a body without one (`Transfer-Encoding: chunked`) is read here, at
most the limit plus one chunk, before the app sees any of it, and refused as soon as it passes
the limit. Either way the answer is 413 with a JSON-RPC error saying what the limit is, and a
count in `pallas_requests_refused_total`; uvicorn drops the rest of a refused body unread.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pallas_runtime.sizes import MiB, human_bytes

MAX_REQUEST_BYTES = 4 * MiB
"""The MCP SDK's limit on one Streamable HTTP request body (not configurable through fastmcp)."""
INVALID_REQUEST = -32600


class RequestLimit:
    """Refuse requests whose body is over `limit` bytes, declared or streamed, before the app reads them."""

    def __init__(self, app: ASGIApp, limit: int, on_refused: Callable[[], None]) -> None:
        self._app = app
        self._limit = limit
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer an oversized request here; pass everything else to the app."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = _content_length(headers)
        if declared is not None and declared > self._limit:
            self._on_refused()
            await _refuse(send, f"the request is {human_bytes(declared)}", self._limit)
            return
        if declared is not None or "transfer-encoding" not in headers:
            await self._app(scope, receive, send)  # no body, or one the server stops at its length
            return
        read, body = await read_body(receive, self._limit)
        if body is None and read[-1]["type"] == "http.request":
            self._on_refused()
            await _refuse(send, f"the request is over {human_bytes(self._limit)}", self._limit)
            return
        await self._app(scope, replaying(read, receive), send)


def _content_length(headers: Headers) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


async def read_body(receive: Receive, limit: int) -> tuple[list[Message], bytes | None]:
    """The messages read, and the whole body (None when over `limit` or cut by a disconnect).

    At most `limit` bytes plus one message are held: reading stops as soon as the body is over.
    """
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A receive that hands out the messages already read, then reads on."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


async def _refuse(send: Send, size: str, limit: int) -> None:
    message = (
        f"{size}; this agent accepts at most {human_bytes(limit)} per request (images count "
        "base64-encoded): send smaller or fewer images"
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
