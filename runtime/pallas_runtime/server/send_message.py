"""The `send_message` tool and its alias `<agent>`: one turn of a conversation (docs/api.md §3).

The turn itself is `TurnEntry`'s (shared with A2A): checked (call path, message, images,
conversation id, params) before the model is asked, a failure ending it with a coded error and
one log line, run as one in flight (so a stopping agent can drain it). The result names the
conversation it was kept in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import Tool, ToolResult
from mcp_types import CallToolRequestParams

from pallas_api.config import SendParams
from pallas_api.names import CONVERSATION_META, HISTORY_TRIMMED_META, TOOL_CALLS_META
from pallas_io.tracing import exemplar
from pallas_runtime.agent.inputs import ImageInput
from pallas_runtime.agent.live import LiveAgent
from pallas_runtime.agent.trace import tool_trace
from pallas_runtime.agent.turns import Reply
from pallas_runtime.approval.elicit import caller_approver
from pallas_runtime.approval.question import NO_CHANNEL
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.edge.credential import forwarded_credential
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.descriptions import send_message_description, send_message_names
from pallas_runtime.server.request import (
    progress_sender,
    request_meta,
    session_id,
    wants_chunks,
    wants_tool_calls,
)
from pallas_runtime.server.tool_errors import CodedToolError
from pallas_runtime.server.turn_entry import TurnEntry, TurnFailed, TurnRequest
from pallas_runtime.spending.chain import spend_meta


class SendMessageMetrics(Middleware):
    """Counts every send_message outcome (the alias's too), including calls refused early."""

    def __init__(self, agent: str, metrics: RuntimeMetrics, names: Sequence[str]) -> None:
        self._agent = agent
        self._metrics = metrics
        self._names = frozenset(names)

    async def on_call_tool(
        self,
        context: MiddlewareContext[CallToolRequestParams],
        call_next: CallNext[CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        """Time the call and count its outcome when it is send_message or its alias."""
        if context.message.name not in self._names:
            return await call_next(context)
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await call_next(context)
            if not getattr(result, "is_error", False):
                outcome = "ok"
            return result
        finally:
            self._metrics.send_message_total.labels(self._agent, outcome).inc()
            self._metrics.send_message_duration.labels(self._agent).observe(
                time.perf_counter() - started, exemplar()
            )


class SendMessage:
    """The MCP tool: what the request carries, the turn (`TurnEntry`), the answer's `_meta`."""

    def __init__(self, live: LiveAgent, entry: TurnEntry, *, verified: bool) -> None:
        self._live = live
        self._entry = entry
        self._verified = verified
        self.names = send_message_names(live.config)
        """The names it is offered under: `send_message` and, unless taken, the agent's."""

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the tool under each of its names, one schema and description for all.

        Called again when the agent's title or description changes: a tool of the same name
        replaces the one before.
        """
        description = send_message_description(self._live.config)
        for name in self.names:
            mcp.add_tool(
                Tool.from_function(self.send_message, name=name, description=description, output_schema=None)
            )

    async def send_message(
        self,
        message: str,
        ctx: Context,
        images: list[ImageInput] | None = None,
        conversation_id: str | None = None,
        params: SendParams | None = None,
    ) -> ToolResult:
        """One turn: the checks, the model and the tools, then the answer."""
        request = TurnRequest(
            caller=current_caller(),
            message=message,
            call_meta=request_meta(ctx),
            images=images,
            conversation_id=conversation_id,
            session_id=session_id(),
            inbound_auth=forwarded_credential(verified=self._verified),
            params=params,
            progress=progress_sender(ctx),
            chunks=wants_chunks(ctx),
            approver=caller_approver(ctx) or NO_CHANNEL,  # tool calls ask this request's client
        )
        try:
            reply = await self._entry.run(request)
        except TurnFailed as exc:
            # fastmcp's generic "Error calling tool" line (no agent, no reason) is silenced.
            spent = spend_meta(*exc.spent) if exc.spent else None
            raise CodedToolError(str(exc), exc.code, spent, processed=exc.processed) from None
        return ToolResult(content=reply.text, meta=_result_meta(reply, wants_tool_calls(ctx)) or None)


def _result_meta(reply: Reply, with_tool_calls: bool) -> dict[str, Any]:
    """The result's `_meta`: its conversation, history left out, and the tool calls if asked."""
    meta: dict[str, Any] = {}
    if reply.conversation_id is not None:
        meta[CONVERSATION_META] = reply.conversation_id
    if reply.history_left_out:
        meta[HISTORY_TRIMMED_META] = {"droppedMessages": reply.history_left_out}
    if with_tool_calls:
        meta[TOOL_CALLS_META] = tool_trace(reply.turn)
    if reply.spent is not None:
        meta.update(spend_meta(*reply.spent))
    return meta
