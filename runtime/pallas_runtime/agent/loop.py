"""The agent loop: instruction + history + user turn → LLM → tools in parallel → … → final text.

Tools offered to the model are `<server>__<tool>` for the allowed tools of every downstream
server and `<agent>__send_message` for every peer agent, or, when the exposure is on demand
(`toolExposure`, `agent/gateway.py`), the peers and the three gateway tools. The tool policy
filters what the model sees and is enforced again at every call (`agent/toolbox.py`). Every
failure the model can recover from (unknown tool, bad arguments, downstream errors) goes back to
it as an error result; LLM failures and running out of iterations end the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_api.fields import RequestParams, ResponseFormat
from pallas_api.workflow import WorkflowSpec
from pallas_io.logs import SecretValues
from pallas_io.tracing import exemplar
from pallas_runtime.agent import gateway, workflow
from pallas_runtime.agent.audit import audit_tool_call
from pallas_runtime.agent.latency import LLM, Latencies
from pallas_runtime.agent.toolbox import OfferedTool, ToolBox, llm_tool_name
from pallas_runtime.agent.turn import Turn, TurnChoice
from pallas_runtime.agent.window import answer_room, input_room, left_out, message_tokens, request_tokens
from pallas_runtime.conversations.caller import kept_id
from pallas_runtime.downstream.content import text_of
from pallas_runtime.downstream.source import ToolOutcome, ToolSource
from pallas_runtime.llm.params import merge_params
from pallas_runtime.llm.provider import LLMError, LLMProvider
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
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
from pallas_runtime.spending import guard as spending
from pallas_runtime.tracing import completed, llm_span, provider_name, turn_span

__all__ = [
    "AgentLoop",
    "MaxIterationsExceeded",
    "OfferedTool",
    "ToolChoiceUnavailable",
    "TurnChoice",
    "TurnResult",
    "llm_tool_name",
]

log = logging.getLogger("pallas.agent")


class MaxIterationsExceeded(Exception):
    """The model kept calling tools past `maxIterations`."""


ROUNDS_RUN = "rounds_run"
"""The attribute a turn's failure (LLM, rounds, budget) carries the messages it ran under: its user
message, then every assistant and tool message up to the failure (`rounds_run`)."""


def rounds_run(exc: BaseException) -> tuple[Message, ...]:
    """The messages a failed turn ran before `exc` ended it (its user message first); () if unknown."""
    ran = getattr(exc, ROUNDS_RUN, ())
    return ran if isinstance(ran, tuple) else ()


class ToolChoiceUnavailable(ValueError):
    """`toolChoice` names a tool the agent does not offer this turn."""


FORCING = frozenset({"required"})
"""Tool choices other than a tool's name that force a tool call (applied to the first round only)."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one send_message produced: the answer and the messages to store."""

    text: str
    messages: list[Message]
    """The turn's messages to keep: the user message, then every assistant and tool message."""
    history_left_out: int = 0
    """The most of the history's oldest messages any of the turn's LLM calls left out to fit the
    model's context window (`agent/window.py`)."""


def _error(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, call.name, (TextPart(text),), is_error=True)


def _result(call: ToolCall, outcome: ToolOutcome) -> ToolResult:
    return ToolResult(call.id, call.name, outcome.content, outcome.is_error)


class AgentLoop:
    """Runs turns of one agent; safe to use from many concurrent requests."""

    def __init__(
        self,
        config: AgentConfig,
        provider: LLMProvider,
        sources: Sequence[ToolSource],
        metrics: RuntimeMetrics,
        secrets: SecretValues | None = None,
        latencies: Latencies | None = None,
    ) -> None:
        self._config = config
        self._provider = provider
        self._metrics = metrics
        self._secrets = secrets
        self.latencies = latencies or Latencies()
        """How long LLM calls and each source's calls take lately (for `get_health`)."""
        self.tools = ToolBox(config, sources, metrics, secrets, self.latencies)
        """The agent's tools under its policy (also behind the MCP surface's gateway tools)."""

    async def offered_tools(self, inbound_auth: str | None = None) -> dict[str, OfferedTool]:
        """Every tool of every reachable source by its model-facing name, denied ones flagged."""
        return await self.tools.offered(inbound_auth)

    async def run(self, history: Sequence[Message], user: UserMessage, turn: Turn) -> TurnResult:
        """One `send_message`: loop until the model answers without tool calls.

        `turn` is what the call carries (`agent.turn`): its credential, progress, conversation
        (for peer calls; the loop stores nothing), path of agents, parameters over the agent's,
        and model and system prompt addition (default: the agent's model and instruction).

        Raises:
            LLMError: the provider failed after its retries.
            MaxIterationsExceeded: no final answer within `maxIterations` rounds.
            ToolChoiceUnavailable: `toolChoice` names a tool not offered this turn.
        """
        choice = turn.choice
        if choice is None:
            choice = TurnChoice(self._provider, self._config.model, self._config.capabilities)
        conversation_id = kept_id(turn.conversation)
        with turn_span(self._config.name, conversation_id):
            if self._config.workflow is not None:
                return await self._workflow(self._config.workflow, user, turn, choice, conversation_id)
            return await self._run(history, user, turn, choice, conversation_id)

    async def _workflow(
        self,
        spec: WorkflowSpec,
        user: UserMessage,
        turn: Turn,
        choice: TurnChoice,
        conversation_id: str | None,
    ) -> TurnResult:
        """A workflow agent's turn: its steps in their declared shape, in place of the tool loop.

        The agent's own model is used only by a router's choice and a planner's moves, through
        `_complete` (budgets, metrics, spans, streamed text as any LLM call of the agent).
        """
        merged = merge_params(self._config.request_params, turn.params)

        async def complete(
            system: str, messages: Sequence[Message], response_format: ResponseFormat | None
        ) -> Completion:
            params = merged.model_copy(update={"response_format": response_format, "tool_choice": None})
            return await self._complete(turn, choice, system, list(messages), [], params, conversation_id)

        steps = await workflow.Steps.open(self.tools, turn, complete, self._config.instruction)
        text = await workflow.answer(spec, text_of(user.content), steps)
        answer = cut_to(text, self._config.limits.max_answer_bytes, "answer")
        return TurnResult(answer, [user, *steps.transcript(), AssistantMessage(answer)])

    async def _run(
        self,
        history: Sequence[Message],
        user: UserMessage,
        turn: Turn,
        choice: TurnChoice,
        conversation_id: str | None,
    ) -> TurnResult:
        system = choice.system_prompt(self._config.instruction, self._config.prompts)
        progress = turn.progress
        offered = await self.offered_tools(turn.credential)
        if choice.tools_allowlist is not None:  # the call's own narrowing, never a widening
            offered = {n: o for n, o in offered.items() if not choice.narrows(o.tool.qualified_name)}
        merged = merge_params(self._config.request_params, turn.params)
        first, later = self._round_params(merged, offered)
        tools = gateway.menu(
            offered, self._config.tool_exposure, choice.capabilities, merged, first.tool_choice
        )
        room = input_room(choice.capabilities, merged) - request_tokens(system, tools.specs)
        messages: list[Message] = [user]
        left_out_most = 0
        try:
            for round_number in range(self._config.max_iterations):
                cut = left_out(history, messages, room)
                left_out_most = max(left_out_most, cut)
                completion = await self._complete(
                    turn, choice, system, [*history[cut:], *messages], tools.specs,
                    first if round_number == 0 else later, conversation_id,
                )  # fmt: skip
                assistant = AssistantMessage(
                    completion.text, completion.tool_calls, signature=completion.signature
                )
                messages.append(assistant)
                if not completion.tool_calls:
                    if not completion.text.strip():
                        messages.pop()  # nothing said: not a message to keep
                        raise LLMError(
                            f"{self._config.provider.name}: the model answered with neither text nor tool "
                            f"calls (stop reason {completion.stop_reason or 'unknown'})"
                        )
                    answer = cut_to(completion.text, self._config.limits.max_answer_bytes, "answer")
                    if answer != completion.text:
                        messages[-1] = AssistantMessage(answer)
                    if left_out_most:
                        log.debug(
                            "left out the %d oldest of %d stored messages to fit the context window",
                            left_out_most, len(history), extra={"agent": self._config.name},
                        )  # fmt: skip
                    return TurnResult(answer, messages, left_out_most)
                await progress.step("tool")
                results = await asyncio.gather(
                    *(self._dispatch(call, tools, turn) for call in completion.tool_calls)
                )
                messages.append(ToolResultsMessage(tuple(results)))
            raise MaxIterationsExceeded(
                f"agent {self._config.name} stopped after {self._config.max_iterations} LLM/tool rounds "
                "without a final answer (raise spec.maxIterations if the task needs more)"
            )
        except (LLMError, MaxIterationsExceeded, spending.BudgetExceeded) as exc:
            # The rounds it ran stay with the failure: its conversation keeps them (`failure`).
            setattr(exc, ROUNDS_RUN, tuple(messages))
            raise

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
        turn: Turn,
        choice: TurnChoice,
        system: str,
        messages: list[Message],
        specs: list[ToolSpec],
        params: RequestParams,
        conversation_id: str | None,
    ) -> Completion:
        progress = turn.progress
        price = choice.capabilities.price
        size = _call_size(turn, choice, system, messages, specs, params)
        # BudgetExceeded ends the turn; a call cancelled in the block is charged its input.
        async with spending.llm_call(turn.budget, progress, price, *size) as reservation:
            await progress.step("llm")
            agent, model = self._config.name, choice.model
            stream = progress.text_stream()
            span_of_call = llm_span(
                agent, provider_name(self._config.provider), model, conversation_id,
                system=system, messages=messages, secrets=self._secrets,
            )  # fmt: skip
            with span_of_call as span:
                started = time.perf_counter()
                try:
                    completion = await choice.provider.complete(
                        system=system,
                        messages=messages,
                        tools=specs,
                        params=params,
                        on_text=stream.feed if stream is not None else None,
                    )
                except LLMError:
                    elapsed = time.perf_counter() - started
                    self._metrics.llm_request_duration.labels(agent, model, "error").observe(
                        elapsed, exemplar()
                    )
                    self.latencies.record(LLM, elapsed)
                    raise
                elapsed = time.perf_counter() - started
                completed(span, completion, self._secrets)
                self._metrics.llm_request_duration.labels(agent, model, "ok").observe(elapsed, exemplar())
            self.latencies.record(LLM, elapsed)
            await spending.after_llm_call(
                turn.budget, self._metrics, agent, model, price, completion.usage, progress, reservation
            )
        if stream is not None:
            await stream.flush()
            if not stream.received and completion.tool_calls and completion.text:
                # Not streamed: the text that goes with tool calls is never in the result, so it
                # goes to the caller now (a final answer is the result itself).
                await progress.text(completion.text)
        self._metrics.llm_turns_total.labels(agent, model).inc()
        for kind, count in completion.usage.by_kind().items():
            if count:
                self._metrics.llm_tokens_total.labels(agent, model, kind).inc(count)
        return completion

    async def _dispatch(self, call: ToolCall, tools: gateway.ToolMenu, turn: Turn) -> ToolResult:
        if tools.on_demand and call.name in gateway.GATEWAY_TOOLS:
            return await self._gateway_call(call, tools, turn)
        entry = tools.offered.get(call.name)
        if entry is None:
            available = ", ".join(sorted(n for n, o in tools.offered.items() if o.allowed))
            return _result(call, self.tools.unknown(call.name, available))
        if call.arguments_error is not None:
            return self._invalid(call, entry.source.name, entry.tool.name, call.arguments_error)
        return _result(
            call, await self.tools.call(entry, call.arguments, turn, shown=call.name, call_id=call.id)
        )

    def _invalid(
        self,
        call: ToolCall,
        source: str,
        tool: str,
        why: str,
        reason: str = "arguments are not a JSON object",
    ) -> ToolResult:
        invalid = ErrorCode.INVALID_ARGUMENTS
        audit_tool_call(self._config.name, source, tool, "ERROR", 0.0, reason, invalid)
        return _error(call, f"arguments for {call.name!r} are invalid: {why}")

    async def _gateway_call(self, call: ToolCall, tools: gateway.ToolMenu, turn: Turn) -> ToolResult:
        """A model's call of `list_servers`, `get_server_tools` or `execute_tool`."""
        if call.arguments_error is not None:
            return self._invalid(call, "", call.name, call.arguments_error)
        offered = tools.offered
        servers = self.tools.server_names
        try:
            args = gateway.parse_arguments(call.name, call.arguments)
            if call.name == gateway.LIST_SERVERS:
                answer = gateway.list_servers(offered, servers)
            elif call.name == gateway.GET_SERVER_TOOLS:
                answer = gateway.server_tools(
                    offered, servers, args.server, names=args.names, pattern=args.pattern,
                    max_schema_tokens=args.max_schema_tokens, allowance=tools.schema_allowance,
                )  # fmt: skip
            else:
                entry = gateway.target(offered, servers, args.server, args.tool)
                limit = args.timeout_ms / 1000 if args.timeout_ms else None
                outcome = await self.tools.call(entry, dict(args.args or {}), turn, time_limit=limit)
                return _result(call, outcome)
        except gateway.GatewayError as exc:
            if exc.code is ErrorCode.INVALID_ARGUMENTS:
                return self._invalid(call, "", call.name, str(exc), reason=str(exc))
            audit_tool_call(self._config.name, "", call.name, "DENY", 0.0, str(exc), exc.code)
            return _error(call, str(exc))
        return ToolResult(call.id, call.name, (TextPart(json.dumps(answer, ensure_ascii=False)),), False)


def _call_size(
    turn: Turn,
    choice: TurnChoice,
    system: str,
    messages: Sequence[Message],
    specs: Sequence[ToolSpec],
    params: RequestParams,
) -> tuple[int, int]:
    """The most an LLM call can spend: its input as estimated and the room for its answer.

    (0, 0) when nothing limits the turn: nothing is reserved, and nothing is estimated.
    """
    if turn.budget is None or not turn.budget.limited:
        return 0, 0
    estimate = request_tokens(system, specs) + sum(message_tokens(m) for m in messages)
    return estimate, answer_room(choice.capabilities, params)
