"""The `send_message` tool and its alias `<agent>`: one turn of a conversation (docs/api.md §3).

The turn itself is `TurnEntry`'s (shared with A2A): checked (call path, message, images,
conversation id, params) before the model is asked, a failure ending it with a coded error and
one log line, run as one in flight (so a stopping agent can drain it). The result names the
conversation it was kept in.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import Tool, ToolResult
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CallToolRequestParams, CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pallas_api.config import SendParams
from pallas_api.errors import ErrorCode
from pallas_api.names import (
    CONVERSATION_META,
    HISTORY_TRIMMED_META,
    RESUMABLE_META,
    TASK_PROGRESS_PREFIX,
    TOOL_CALLS_META,
)
from pallas_io.tracing import exemplar
from pallas_runtime.agent.inputs import ImageInput
from pallas_runtime.agent.live import LiveAgent
from pallas_runtime.agent.trace import tool_trace
from pallas_runtime.agent.turns import Reply
from pallas_runtime.approval.elicit import NO_ELICITATION_DECLARED, RELAY_META, caller_approver
from pallas_runtime.approval.question import NO_CHANNEL, Approver, Nobody
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.conversations.tasks import TaskRecord
from pallas_runtime.edge.credential import forwarded_credential
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.descriptions import send_message_description, send_message_names
from pallas_runtime.server.held import HeldTurns, TaskNotFound, held_channel
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

HELD_STATE = "held:"
"""The `requestState` of an MRTR question: the held turn the retry continues (sealed by fastmcp)."""


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

    def __init__(
        self, live: LiveAgent, entry: TurnEntry, *, verified: bool, held: HeldTurns | None = None
    ) -> None:
        self._live = live
        self._entry = entry
        self._verified = verified
        self._held = held
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
    ) -> ToolResult | mcp_types.InputRequiredResult:
        """One turn: the checks, the model and the tools, then the answer.

        On a sessionless (2026-07-28) request of an agent that may ask for approvals, the turn is
        held (`server.held`): a question is this call's `input_required` result, and the client's
        retry with the answer continues the same turn (MRTR, SEP-2322).
        """
        if held_channel() is None and self._held is not None:

            def body() -> Awaitable[ToolResult]:
                return self._turn(ctx, message, images, conversation_id, params)

            if (request_meta(ctx) or {}).get(RESUMABLE_META) is True:
                return await self._resumable(ctx, body)
            if _sessionless(ctx) and _declares_elicitation(ctx) and self._may_ask():
                return await self._over_mrtr(ctx, body)
        return await self._turn(ctx, message, images, conversation_id, params)

    async def _resumable(self, ctx: Context, body: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
        """The turn as a task, answered here while this request waits (`pallas.dev/resumable`).

        Once the request is gone the turn goes on, followed by `tasks/get`; the first progress
        notification names the task.
        """
        assert self._held is not None
        owner, send = current_caller().owner, progress_sender(ctx)
        meta = request_meta(ctx) or {}
        relay = meta.get(RELAY_META)
        try:
            record = await self._held.start(
                owner, body, relay=relay if isinstance(relay, str) and relay else None,
                chunks=wants_chunks(ctx), approver=_approver(ctx),
            )  # fmt: skip
        except StoreUnavailable as exc:
            raise CodedToolError(
                f"the turn could not be kept as a task: {exc}", ErrorCode.SERVER_UNAVAILABLE
            ) from None
        if send is not None:
            await send(0, None, TASK_PROGRESS_PREFIX + record.id)
        record = await self._held.settled(owner, record.id, send, keep=True)
        return _finished(record)

    def _may_ask(self) -> bool:
        """The agent has tools that need approval, or peers whose questions it relays."""
        config = self._live.config
        return bool(config.agents) or any(s.require_approval is not None for s in config.servers)

    async def _over_mrtr(
        self, ctx: Context, body: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult | mcp_types.InputRequiredResult:
        """Start the held turn, or answer the one the retry names; its result or its question."""
        assert self._held is not None
        owner = current_caller().owner
        state = ctx.request_state
        try:
            if state is not None and state.startswith(HELD_STATE):
                task_id = state.removeprefix(HELD_STATE)
                await self._held.answer(owner, task_id, dict(ctx.input_responses or {}))
            else:
                meta = request_meta(ctx) or {}
                relay = meta.get(RELAY_META)
                record = await self._held.start(
                    owner, body, relay=relay if isinstance(relay, str) and relay else None,
                    chunks=wants_chunks(ctx), persist=False,
                )  # fmt: skip
                task_id = record.id
            record = await self._held.settled(owner, task_id, progress_sender(ctx))
        except TaskNotFound:
            raise CodedToolError(
                "the turn this retry answers is not held here any more (it ended, its approval timed "
                "out, or the retry reached another replica)", ErrorCode.NOT_FOUND,
            ) from None  # fmt: skip
        if record.status == "input_required":
            requests = mcp_types.InputRequiredResult.model_validate(
                {"resultType": "input_required", "inputRequests": record.input_requests}
            ).input_requests
            return mcp_types.InputRequiredResult(input_requests=requests, request_state=HELD_STATE + task_id)
        return _finished(record)

    async def _turn(
        self,
        ctx: Context,
        message: str,
        images: list[ImageInput] | None,
        conversation_id: str | None,
        params: SendParams | None,
    ) -> ToolResult:
        channel = held_channel()
        meta = request_meta(ctx)  # read once for all that the turn takes from it
        request = TurnRequest(
            caller=current_caller(),
            message=message,
            call_meta=meta,
            images=images,
            conversation_id=conversation_id,
            session_id=session_id(),
            inbound_auth=forwarded_credential(verified=self._verified),
            params=params,
            progress=channel.progress if channel is not None else progress_sender(ctx, meta),
            chunks=channel.chunks if channel is not None else wants_chunks(ctx, meta),
            approver=channel.approver if channel is not None else _approver(ctx),
        )
        try:
            reply = await self._entry.run(request)
        except TurnFailed as exc:
            # fastmcp's generic "Error calling tool" line (no agent, no reason) is silenced.
            spent = spend_meta(*exc.spent) if exc.spent else None
            raise CodedToolError(str(exc), exc.code, spent, processed=exc.processed) from None
        return ToolResult(content=reply.text, meta=_result_meta(reply, wants_tool_calls(ctx, meta)) or None)


def _sessionless(ctx: Context) -> bool:
    """The request is of the 2026-07-28 revision: no request from server to client can reach it."""
    request = ctx.request_context
    return request is not None and request.protocol_version in MODERN_PROTOCOL_VERSIONS


def _finished(record: TaskRecord) -> ToolResult:
    """The result of a held turn that ended (a cancelled or failed one as its error).

    Raises:
        CodedToolError: the turn failed or was cancelled.
    """
    if record.result is None:
        message = (
            (record.error or {}).get("message") or record.status_message or f"the turn was {record.status}"
        )
        raise CodedToolError(str(message), ErrorCode.SERVER_UNAVAILABLE)
    return ToolResult.from_mcp_result(CallToolResult.model_validate(record.result))


def _declares_elicitation(ctx: Context) -> bool:
    """The sessionless request's client capabilities (in its `_meta`) include elicitation."""
    meta = request_meta(ctx) or {}
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY)
    return isinstance(capabilities, Mapping) and capabilities.get("elicitation") is not None


def _approver(ctx: Context) -> Approver:
    """Whom a turn run in place asks: the request's client on its back channel, if it can be asked."""
    if _sessionless(ctx) and not _declares_elicitation(ctx):
        return Nobody(NO_ELICITATION_DECLARED)
    return caller_approver(ctx) or NO_CHANNEL


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
