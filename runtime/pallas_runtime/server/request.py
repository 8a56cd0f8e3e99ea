"""What a tool or prompt reads from the MCP request it serves: `_meta`, the session, the id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types
from fastmcp import Context
from fastmcp.server.dependencies import get_http_headers

from pallas_api.errors import ErrorCode
from pallas_api.names import CHUNKS_META, TOOL_CALLS_META
from pallas_runtime.agent.progress import Send
from pallas_runtime.conversations.caller import checked_id
from pallas_runtime.server.tool_errors import CodedToolError


def request_meta(ctx: Context) -> Mapping[str, Any] | None:
    """The request's `_meta` as sent (the wire dict: camelCase keys)."""
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    return meta if isinstance(meta, Mapping) else None


_READ: Any = object()
"""`meta`'s default: read the request's `_meta` from `ctx` (a caller that has it passes it)."""


def progress_sender(ctx: Context, meta: Mapping[str, Any] | None = _READ) -> Send | None:
    """Where the turn's progress goes: nowhere unless the caller sent a progress token.

    Each notification is sent as MCP's `notifications/progress` for the request, with the
    `_meta` a typed chunk rides in (`agent.progress`) when there is one.
    """
    if meta is _READ:
        meta = request_meta(ctx)
    token = meta.get("progressToken") if meta else None
    if token is None:
        return None
    # Read now: `ctx` answers from the request context current where it is asked, and a held
    # turn (`server.held`) sends this request's progress from a task started by another request.
    session, request_id = ctx.session, ctx.request_id

    async def send(
        progress: float, total: float | None, message: str, /, *, meta: Mapping[str, Any] | None = None
    ) -> None:
        params = mcp_types.ProgressNotificationParams(
            progress_token=token,
            progress=progress,
            total=total,
            message=message,
            _meta=dict(meta) if meta else None,
        )
        await session.send_notification(mcp_types.ProgressNotification(params=params), request_id)

    return send


def wants_chunks(ctx: Context, meta: Mapping[str, Any] | None = _READ) -> bool:
    """The caller asked for typed chunks with its progress (`_meta["pallas.dev/chunks"]`)."""
    if meta is _READ:
        meta = request_meta(ctx)
    return bool(meta and meta.get(CHUNKS_META) is True)


def wants_tool_calls(ctx: Context, meta: Mapping[str, Any] | None = _READ) -> bool:
    """The caller asked for the turn's tool calls in the result (`_meta["pallas.dev/toolCalls"]`)."""
    if meta is _READ:
        meta = ctx.request_context.meta if ctx.request_context is not None else None
    return bool(meta and meta.get(TOOL_CALLS_META) is True)


def session_id() -> str | None:
    """The request's `Mcp-Session-Id`; None without one (sessionless, or not over HTTP)."""
    return get_http_headers(include={"mcp-session-id"}).get("mcp-session-id")


def checked_conversation_id(conversation_id: str | None) -> str | None:
    """The id as given (None for none), or an `INVALID_ARGUMENTS` error naming the rule it breaks.

    Raises:
        CodedToolError: the id is too long or not printable text.
    """
    try:
        return checked_id(conversation_id) if conversation_id else None
    except ValueError as exc:
        raise CodedToolError(str(exc), ErrorCode.INVALID_ARGUMENTS) from None
