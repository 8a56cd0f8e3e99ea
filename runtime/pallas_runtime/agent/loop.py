"""The agent loop: instruction + history + user turn → LLM → tools in parallel → … → final text.

Tools offered to the model are `<server>__<tool>` for the allowed tools of every downstream
server and `<agent>__send_message` for every peer agent. The tool policy filters what the model
sees and is enforced again at dispatch: a call to a denied tool gets an error result and counts
in `pallas_tool_denied_total`. Every failure the model can recover from (unknown tool, bad
arguments, downstream errors) goes back to it as an error result; LLM failures and running out
of iterations end the call.

Tool results (and a downstream call's progress messages) are scrubbed of the agent's own secret
values (its provider key, its servers' header values from Secrets) before the model or the caller
sees them: a server that echoes the headers it received would otherwise hand the model, its
provider and the conversation the keys the agent holds (the same values the logs redact).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pallas_api.config import AgentConfig, RequestParams
from pallas_api.errors import ErrorCode
from pallas_io.logs import SecretValues
from pallas_runtime.agent.audit import Outcome, audit_tool_call
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.window import input_budget, left_out, request_tokens
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.call_path import CallPath
from pallas_runtime.downstream.source import (
    DownstreamError,
    DownstreamTimeout,
    ProgressHandler,
    RemoteTool,
    ToolOutcome,
    ToolSource,
)
from pallas_runtime.llm.params import merge_params
from pallas_runtime.llm.provider import LLMError, LLMProvider
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    ContentPart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
)
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.sizes import cut_to

log = logging.getLogger("pallas.agent")

_LLM_NAME = re.compile(r"[^A-Za-z0-9_-]")
_LLM_NAME_MAX = 64  # OpenAI's limit on function names; Anthropic's is the same


class MaxIterationsExceeded(Exception):
    """The model kept calling tools past `maxIterations`."""


class ToolChoiceUnavailable(ValueError):
    """`toolChoice` names a tool the agent does not offer this turn."""


FORCING = frozenset({"required"})
"""Tool choices other than a tool's name that force a tool call (applied to the first round only)."""


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A tool as offered to the model, and where calls to it go."""

    source: ToolSource
    tool: RemoteTool
    allowed: bool


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one send_message produced: the answer and the messages to store."""

    text: str
    messages: list[Message]
    """The turn's messages to keep: the user message, then every assistant and tool message."""
    history_left_out: int = 0
    """The most of the history's oldest messages any of the turn's LLM calls left out to fit the
    model's context window (`agent/window.py`)."""


def llm_tool_name(qualified: str) -> str:
    """A name every provider accepts (`[A-Za-z0-9_-]{1,64}`), stable for a given tool."""
    name = _LLM_NAME.sub("_", qualified)
    if len(name) <= _LLM_NAME_MAX and name == qualified:
        return name
    digest = hashlib.sha256(qualified.encode()).hexdigest()[:8]
    return f"{name[: _LLM_NAME_MAX - 9]}_{digest}"


def _error(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, call.name, (TextPart(text),), is_error=True)


class AgentLoop:
    """Runs turns of one agent; safe to use from many concurrent requests."""

    def __init__(
        self,
        config: AgentConfig,
        provider: LLMProvider,
        sources: Sequence[ToolSource],
        metrics: RuntimeMetrics,
        secrets: SecretValues | None = None,
    ) -> None:
        self._config = config
        self._provider = provider
        self._sources = list(sources)
        self._metrics = metrics
        self._secrets = secrets or SecretValues()

    async def offered_tools(self, inbound_auth: str | None = None) -> dict[str, OfferedTool]:
        """Every tool of every reachable source by its model-facing name, denied ones flagged.

        A source that cannot list its tools is left out of this turn (and logged); the model
        still works with the others.
        """
        listings = await asyncio.gather(
            *(s.list_tools(inbound_auth=inbound_auth) for s in self._sources), return_exceptions=True
        )
        offered: dict[str, OfferedTool] = {}
        for source, listing in zip(self._sources, listings, strict=True):
            if isinstance(listing, BaseException):
                log.warning("tools of %s unavailable this turn: %s", source.name, listing)
                continue
            for tool in listing:
                name = llm_tool_name(tool.qualified_name)
                if name in offered:
                    log.warning("tool name %s is ambiguous; keeping the first", tool.qualified_name)
                    continue
                offered[name] = OfferedTool(source, tool, self._config.tools.permits(tool.qualified_name))
        return offered

    async def run(
        self,
        history: Sequence[Message],
        user: UserMessage,
        *,
        inbound_auth: str | None,
        progress: ProgressReporter,
        conversation: ConversationKey | None = None,
        call_path: CallPath | None = None,
        params: RequestParams | None = None,
    ) -> TurnResult:
        """One `send_message`: loop until the model answers without tool calls.

        `conversation` is the turn's conversation (for peer calls; the loop stores nothing);
        `call_path` the agents this call passed through, this one last (for peer calls);
        `params` the call's own request parameters, over the agent's.

        Raises:
            LLMError: the provider failed after its retries.
            MaxIterationsExceeded: no final answer within `maxIterations` rounds.
            ToolChoiceUnavailable: `toolChoice` names a tool not offered this turn.
        """
        offered = await self.offered_tools(inbound_auth)
        specs = [
            ToolSpec(name, o.tool.description, o.tool.input_schema)
            for name, o in offered.items()
            if o.allowed
        ]
        merged = merge_params(self._config.request_params, params)
        first, later = self._round_params(merged, offered)
        budget = input_budget(self._config.capabilities, merged) - request_tokens(
            self._config.instruction, specs
        )
        turn: list[Message] = [user]
        left_out_most = 0
        for round_number in range(self._config.max_iterations):
            cut = left_out(history, turn, budget)
            left_out_most = max(left_out_most, cut)
            completion = await self._complete(
                [*history[cut:], *turn], specs, progress, first if round_number == 0 else later
            )
            assistant = AssistantMessage(completion.text, completion.tool_calls)
            turn.append(assistant)
            if not completion.tool_calls:
                if not completion.text.strip():
                    raise LLMError(
                        f"{self._config.provider.name}: the model answered with neither text nor tool "
                        f"calls (stop reason {completion.stop_reason or 'unknown'})"
                    )
                answer = cut_to(completion.text, self._config.limits.max_answer_bytes, "answer")
                if answer != completion.text:
                    turn[-1] = AssistantMessage(answer)
                if left_out_most:
                    log.debug(
                        "left out the %d oldest of %d stored messages to fit the context window",
                        left_out_most, len(history), extra={"agent": self._config.name},
                    )  # fmt: skip
                return TurnResult(answer, turn, left_out_most)
            await progress.step("tool")
            results = await asyncio.gather(
                *(
                    self._dispatch(call, offered, inbound_auth, progress, conversation, call_path)
                    for call in completion.tool_calls
                )
            )
            turn.append(ToolResultsMessage(tuple(results)))
        raise MaxIterationsExceeded(
            f"agent {self._config.name} stopped after {self._config.max_iterations} LLM/tool rounds "
            "without a final answer (raise spec.maxIterations if the task needs more)"
        )

    def _round_params(
        self, params: RequestParams, offered: dict[str, OfferedTool]
    ) -> tuple[RequestParams, RequestParams]:
        """The parameters of the turn's first LLM call and of the later ones.

        A named `toolChoice` becomes the model-facing name of that tool. A choice that forces a
        tool call (`required`, a name) applies to the first call only: forced on every round,
        the model could never give its answer.
        """
        choice = params.tool_choice
        if choice is None or choice in ("auto", "none"):
            return params, params
        later = params.model_copy(update={"tool_choice": None})
        if choice in FORCING:
            return params, later
        for name, entry in offered.items():
            if entry.tool.qualified_name == choice and entry.allowed:
                return params.model_copy(update={"tool_choice": name}), later
        available = ", ".join(sorted(o.tool.qualified_name for o in offered.values() if o.allowed)) or "none"
        raise ToolChoiceUnavailable(
            f"toolChoice {choice!r} is not a tool this agent offers now (available tools: {available})"
        )

    async def _complete(
        self,
        messages: list[Message],
        specs: list[ToolSpec],
        progress: ProgressReporter,
        params: RequestParams,
    ) -> Completion:
        await progress.step("llm")
        agent, model = self._config.name, self._config.model
        started = time.perf_counter()
        try:
            completion = await self._provider.complete(
                system=self._config.instruction, messages=messages, tools=specs, params=params
            )
        except LLMError:
            self._metrics.llm_request_duration.labels(agent, model, "error").observe(
                time.perf_counter() - started
            )
            raise
        self._metrics.llm_request_duration.labels(agent, model, "ok").observe(time.perf_counter() - started)
        self._metrics.llm_turns_total.labels(agent, model).inc()
        for kind, count in completion.usage.by_kind().items():
            if count:
                self._metrics.llm_tokens_total.labels(agent, model, kind).inc(count)
        return completion

    async def _dispatch(
        self,
        call: ToolCall,
        offered: dict[str, OfferedTool],
        inbound_auth: str | None,
        progress: ProgressReporter,
        conversation: ConversationKey | None,
        call_path: CallPath | None,
    ) -> ToolResult:
        agent = self._config.name
        entry = offered.get(call.name)
        if entry is None:
            audit_tool_call(agent, "", call.name, "DENY", 0.0, "unknown tool", ErrorCode.TOOL_NOT_FOUND)
            available = ", ".join(sorted(n for n, o in offered.items() if o.allowed)) or "none"
            return _error(call, f"unknown tool {call.name!r}; available tools: {available}")
        source, tool = entry.source.name, entry.tool
        if not (entry.allowed and self._config.tools.permits(tool.qualified_name)):
            self._metrics.tool_denied_total.labels(agent, source).inc()
            refused = ErrorCode.DENIED_BY_POLICY
            audit_tool_call(agent, source, tool.name, "DENY", 0.0, "not allowed by spec.tools", refused)
            return _error(call, f"tool {call.name!r} is not allowed for this agent")
        if call.arguments_error is not None:
            invalid = ErrorCode.INVALID_ARGUMENTS
            audit_tool_call(
                agent, source, tool.name, "ERROR", 0.0, "arguments are not a JSON object", invalid
            )
            return _error(call, f"arguments for {call.name!r} are invalid: {call.arguments_error}")

        await progress.tool_started(source, tool.name)
        started = time.perf_counter()
        timed_out = False
        try:
            outcome = await entry.source.call_tool(
                tool.name,
                call.arguments,
                inbound_auth=inbound_auth,
                on_progress=self._scrubbed(progress.relay(source, tool.name)),
                conversation=conversation,
                call_path=call_path,
            )
        except DownstreamError as exc:
            timed_out = isinstance(exc, DownstreamTimeout)
            outcome = ToolOutcome((TextPart(str(exc)),), is_error=True, code=exc.code)
        except Exception:
            log.exception("calling %s failed unexpectedly", tool.qualified_name)
            outcome = ToolOutcome((TextPart(f"calling {tool.qualified_name} failed (see agent logs)"),), True)
        elapsed = time.perf_counter() - started
        verdict: Outcome = "TIMEOUT" if timed_out else "ERROR" if outcome.is_error else "ALLOW"
        audit_tool_call(
            agent, source, tool.name, verdict, elapsed, code=outcome.code if outcome.is_error else None
        )
        self._metrics.tool_call_duration.labels(agent, source, "tool").observe(elapsed)
        self._metrics.tool_calls_total.labels(
            agent, source, "tool", "error" if outcome.is_error else "ok"
        ).inc()
        await progress.tool_finished(source, tool.name, ok=not outcome.is_error)
        return ToolResult(
            call.id, call.name, self._within_budget(outcome, tool.qualified_name), outcome.is_error
        )

    def _within_budget(self, outcome: ToolOutcome, qualified: str) -> tuple[ContentPart, ...]:
        """The result as the model gets it: texts scrubbed of secrets, then cut to size.

        Scrubbed first, so no part of a secret survives the cut to `limits.maxToolResultBytes`.
        """
        limit = self._config.limits.max_tool_result_bytes
        scrub = self._secrets.scrub
        return tuple(
            TextPart(cut_to(scrub(p.text), limit, f"result of {qualified}")) if isinstance(p, TextPart) else p
            for p in outcome.content
        )

    def _scrubbed(self, relay: ProgressHandler | None) -> ProgressHandler | None:
        """A downstream call's progress relay whose messages are scrubbed of the agent's secrets."""
        if relay is None or not self._secrets:
            return relay
        scrub = self._secrets.scrub

        async def forward(progress: float, total: float | None, message: str | None) -> None:
            await relay(progress, total, scrub(message) if message else message)

        return forward
