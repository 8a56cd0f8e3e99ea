"""The `send_message` tool and its alias `<agent>`: one turn of a conversation (docs/api.md §3).

A call is checked (call path, message, images, conversation id, params) before the model is
asked; a failure ends it with a coded error and one log line. The turn runs as one in flight
(so a stopping agent can drain it, and interrupt it when its drain runs out) and its result
names the conversation it was kept in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import Tool, ToolResult
from mcp_types import CallToolRequestParams

from pallas_api.config import RequestParams
from pallas_api.errors import ErrorCode
from pallas_api.names import HISTORY_TRIMMED_META, TOOL_CALLS_META
from pallas_runtime.agent.inputs import ImageInput, InvalidInput, user_message
from pallas_runtime.agent.live import Generation, LiveAgent
from pallas_runtime.agent.loop import MaxIterationsExceeded, ToolChoiceUnavailable
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.trace import tool_trace
from pallas_runtime.agent.turns import Conversations, Reply
from pallas_runtime.auth.credential import forwarded_credential
from pallas_runtime.conversations.caller import checked_id, current_caller
from pallas_runtime.conversations.model import ConversationBusy, StoreUnavailable, TurnLost
from pallas_runtime.downstream.call_path import CallPath, CallRefused
from pallas_runtime.inflight import InFlight, ShuttingDown
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.conversation_gauge import ConversationGauge
from pallas_runtime.server.descriptions import send_message_description, send_message_names
from pallas_runtime.server.request import progress_sender, request_meta, session_id, wants_tool_calls
from pallas_runtime.server.tool_errors import CodedToolError

log = logging.getLogger("pallas.server")

CONVERSATION_META = "pallas.dev/conversationId"
"""The `_meta` key of a send_message result naming the conversation the turn was stored in."""


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
            self._metrics.send_message_duration.labels(self._agent).observe(time.perf_counter() - started)


class SendMessage:
    """The tool: the checks, the turn, the errors it answers with and the result's `_meta`."""

    def __init__(
        self,
        live: LiveAgent,
        conversations: Conversations,
        inflight: InFlight,
        gauge: ConversationGauge,
        *,
        verified: bool,
    ) -> None:
        self._live = live
        self._agent = live.config.name
        self._conversations = conversations
        self._inflight = inflight
        self._gauge = gauge
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

    def _failed(self, exc: Exception | str, code: ErrorCode) -> CodedToolError:
        """One log line with the agent, the code and the reason, and the error the caller gets.

        A caller's own bad input is INFO, anything else WARNING; fastmcp's generic "Error calling
        tool" line (no agent, no reason) is silenced for them.
        """
        text = str(exc)
        level = logging.INFO if code is ErrorCode.INVALID_ARGUMENTS else logging.WARNING
        log.log(level, "send_message failed: %s", text, extra={"agent": self._agent, "code": code.value})
        return CodedToolError(text, code)

    async def send_message(
        self,
        message: str,
        ctx: Context,
        images: list[ImageInput] | None = None,
        conversation_id: str | None = None,
        params: RequestParams | None = None,
    ) -> ToolResult:
        """One turn: the checks, the model and the tools, then the answer.

        The turn runs on the agent's config, provider and tools as they are when the call
        arrives (`LiveAgent.hold`): an edit applied meanwhile takes effect from the next call.
        """
        with self._live.hold() as generation:
            return await self._turn(generation, message, ctx, images, conversation_id, params)

    async def _turn(
        self,
        generation: Generation,
        message: str,
        ctx: Context,
        images: list[ImageInput] | None,
        conversation_id: str | None,
        params: RequestParams | None,
    ) -> ToolResult:
        config = generation.config
        try:
            call_path = CallPath.inbound(request_meta(ctx), self._agent, config.max_depth)
        except CallRefused as exc:
            raise self._failed(exc, exc.code) from None
        try:
            user = user_message(config, message, images)
            checked = checked_id(conversation_id) if conversation_id else None
            if params is not None:
                if refusal := config.call_params.refusal(params):
                    raise InvalidInput(refusal)
                generation.provider.check_params(params)
        except (InvalidInput, ValueError) as exc:
            raise self._failed(exc, ErrorCode.INVALID_ARGUMENTS) from None
        inbound_auth = forwarded_credential(verified=self._verified)
        reply: Reply | None = None
        try:
            with self._inflight.track():
                reply = await self._conversations.send(
                    generation.loop,
                    current_caller(),
                    user,
                    conversation_id=checked,
                    session_id=session_id(),
                    inbound_auth=inbound_auth,
                    progress=ProgressReporter(self._agent, progress_sender(ctx)),
                    call_path=call_path,
                    params=params,
                )
        except LLMError as exc:
            raise self._failed(f"the language model call failed: {exc}", ErrorCode.LLM_ERROR) from None
        except MaxIterationsExceeded as exc:
            raise self._failed(exc, ErrorCode.MAX_ITERATIONS) from None
        except ToolChoiceUnavailable as exc:
            raise self._failed(exc, ErrorCode.INVALID_ARGUMENTS) from None
        except ConversationBusy as exc:
            raise self._failed(exc, ErrorCode.TIMEOUT) from None
        except ShuttingDown as exc:
            raise self._failed(exc, ErrorCode.AGENT_SHUTTING_DOWN) from None
        except TurnLost as exc:
            raise self._failed(exc, ErrorCode.SERVER_UNAVAILABLE) from None
        except StoreUnavailable as exc:
            raise self._failed(
                f"the conversation was not kept: {exc}", ErrorCode.SERVER_UNAVAILABLE
            ) from None
        finally:
            # A failed turn can change the count too (a store that expired or evicted on the
            # way); only a finished turn that kept no conversation cannot.
            if reply is None or reply.conversation_id is not None:
                await self._gauge.changed(count_changed=reply is not None and reply.created)
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
    return meta
