"""One turn as a caller asks for it, whatever the protocol: the checks, the turn, the coded failure.

MCP's `send_message` and A2A's `SendMessage`/`SendStreamingMessage` both end here, so a turn is
checked, run, logged, drained and counted the same way and fails with the same codes
(docs/api.md §3, and §3 "A2A"). The protocol edges only translate: what the request carried
into a `TurnRequest`, and the `Reply` or `TurnFailed` back into their own wire format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pallas_api.config import AgentConfig, SendParams
from pallas_api.errors import ErrorCode
from pallas_api.fields import RequestParams
from pallas_runtime.agent.audit import audit_turn
from pallas_runtime.agent.choice import BearerMissing, turn_choice
from pallas_runtime.agent.failure import failure_of
from pallas_runtime.agent.inputs import ImageInput, InvalidInput, given_history, user_message
from pallas_runtime.agent.live import Generation, LiveAgent
from pallas_runtime.agent.loop import MaxIterationsExceeded, ToolChoiceUnavailable
from pallas_runtime.agent.progress import ProgressReporter, Send
from pallas_runtime.agent.turn import Turn
from pallas_runtime.agent.turns import Conversations, Reply
from pallas_runtime.agent.workflow import StepFailed, WorkflowFailed
from pallas_runtime.approval.question import NO_CHANNEL, Approver
from pallas_runtime.conversations.caller import Caller, checked_id, keeps_nothing
from pallas_runtime.conversations.model import ConversationBusy, StoreUnavailable, TurnLost
from pallas_runtime.downstream.call_path import CallPath, CallRefused
from pallas_runtime.inflight import InFlight, ShuttingDown
from pallas_runtime.llm.deferred import loaded
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import Message, UserMessage
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server.conversation_gauge import ConversationGauge
from pallas_runtime.spending.chain import BadChainBudget
from pallas_runtime.spending.guard import BudgetExceeded, Budgets, TurnBudget
from pallas_runtime.spending.ledger import MemoryLedger

log = logging.getLogger("pallas.server")


class TurnFailed(Exception):
    """A turn refused or failed; `code` is its machine-readable reason (`pallas_api.errors`)."""

    def __init__(self, message: str, code: ErrorCode, *, processed: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.processed = processed
        """False: refused before any of it ran (`pallas_api.errors.error_content`)."""
        self.spent: tuple[int, int] | None = None
        """Tokens and cost (micros) the turn spent before it failed, for a calling agent."""


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What one caller asked for, as read from its protocol's request."""

    caller: Caller
    message: str
    call_meta: Mapping[str, Any] | None = None
    """The request's call path (`pallas.dev/callPath`, `pallas.dev/hops`), as sent."""
    images: list[ImageInput] | None = None
    conversation_id: str | None = None
    session_id: str | None = None
    inbound_auth: str | None = None
    """The `Authorization` value the agent sends on (see `edge.credential`)."""
    params: SendParams | None = None
    """The call's own request parameters, model and system prompt addition."""
    progress: Send | None = None
    """Where the turn's progress goes (None: the caller follows none)."""
    chunks: bool = False
    """The caller asked for typed chunks with its progress (`agent.progress`)."""
    approver: Approver = NO_CHANNEL
    """Whom the turn asks to approve tool calls: the MCP request's client (others: nobody)."""


_FAILURES: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (ToolChoiceUnavailable, ErrorCode.INVALID_ARGUMENTS),
    (ConversationBusy, ErrorCode.TIMEOUT),
    (ShuttingDown, ErrorCode.AGENT_SHUTTING_DOWN),
    (TurnLost, ErrorCode.SERVER_UNAVAILABLE),
)


class TurnEntry:
    """Checks a request, runs its turn as one in flight, and names why one failed."""

    def __init__(
        self,
        live: LiveAgent,
        conversations: Conversations,
        inflight: InFlight,
        gauge: ConversationGauge,
        metrics: RuntimeMetrics,
        budgets: Budgets | None = None,
    ) -> None:
        self._live = live
        self._budgets = budgets or Budgets(MemoryLedger(), metrics)
        self._metrics = metrics
        self._agent = live.config.name
        # The agent's name is fixed for the process: its series is looked up once, not per turn.
        self._last_turn = metrics.last_turn_time.labels(self._agent)
        self._conversations = conversations
        self._inflight = inflight
        self._gauge = gauge

    def failed(
        self, exc: Exception | str, code: ErrorCode, *, via: str = "send_message", processed: bool = True
    ) -> TurnFailed:
        """One log line with the agent, the code and the reason, and the error the caller gets.

        A caller's own bad input is INFO, anything else WARNING.
        """
        text = str(exc)
        level = logging.INFO if code is ErrorCode.INVALID_ARGUMENTS else logging.WARNING
        log.log(level, "%s failed: %s", via, text, extra={"agent": self._agent, "code": code.value})
        return TurnFailed(text, code, processed=processed)

    async def run(self, request: TurnRequest, *, via: str = "send_message") -> Reply:
        """One turn: the checks, the model and the tools, then the answer.

        The turn runs on the agent's config, provider and tools as they are when the request
        arrives (`LiveAgent.hold`): an edit applied meanwhile takes effect from the next one.

        Args:
            request: What the caller asked for.
            via: The method the caller used, for the log line of a failure.

        Raises:
            TurnFailed: the request was refused or its turn failed (logged once here).
        """
        with self._live.hold() as generation:
            return await self._run(generation, request, via)

    async def _run(self, generation: Generation, request: TurnRequest, via: str) -> Reply:
        config = generation.config
        await loaded(generation.provider)  # a turn right after the start waits for the SDK's import
        try:
            call_path = CallPath.inbound(request.call_meta, self._agent, config.max_depth)
        except CallRefused as exc:
            raise self.failed(exc, exc.code, via=via) from None
        request_params: RequestParams | None = None
        try:
            checked = checked_id(request.conversation_id) if request.conversation_id else None
        except ValueError as exc:
            raise self.failed(exc, ErrorCode.INVALID_ARGUMENTS, via=via) from None
        params, chosen_at_create = await self._conversation_model(request, checked, via)
        try:
            user = user_message(
                config, request.message, request.images, model=params.model if params is not None else None
            )
            if params is not None and (refusal := config.call_params.refusal(params)):
                raise InvalidInput(refusal)
            history = given_history(params, checked)
            choice = turn_choice(
                config, generation.provider, params, request.inbound_auth, generation.secrets
            )
            if params is not None:
                request_params = params.request_params()
                (choice.provider if choice else generation.provider).check_params(request_params)
        except BearerMissing as exc:
            raise self.failed(exc, ErrorCode.DENIED_BY_POLICY, via=via) from None
        except (InvalidInput, ValueError) as exc:
            if (
                chosen_at_create is not None
            ):  # the caller did not name it in this call: say where it came from
                exc = ValueError(
                    f"conversation {checked!r} was created with model {chosen_at_create!r}: {exc}"
                )
            raise self.failed(exc, ErrorCode.INVALID_ARGUMENTS, via=via) from None
        try:
            budget = await self._open_budget(config, request, via)
            turn = Turn(
                caller=request.caller,
                credential=request.inbound_auth,
                progress=ProgressReporter(self._agent, request.progress, chunks=request.chunks),
                call_path=call_path,
                params=request_params,
                choice=choice,
                budget=budget,
                approver=request.approver,
            )
            try:
                reply = await self._turn(generation, request, turn, user, checked, via, history)
            except TurnFailed as exc:
                exc.spent = budget.reported()
                raise
            finally:
                await budget.settle()  # the turn's spend is stored before its caller hears back
            await turn.progress.finished(reply.conversation_id, reply.turn_index)
            return replace(reply, spent=budget.reported())
        finally:
            if choice is not None and choice.provider is not generation.provider:
                await choice.provider.aclose()  # a caller-keyed client is that call's alone

    async def _conversation_model(
        self, request: TurnRequest, conversation_id: str | None, via: str
    ) -> tuple[SendParams | None, str | None]:
        """The call's params with the model its conversation was created with, and that model.

        A conversation made by `create_conversation` with a provider or model runs every turn on
        it; a call's own `params.model` still wins for that turn. The model is checked again at
        each turn by `params.model`'s rules (the deployment may have dropped it since).
        """
        params = request.params
        if conversation_id is None or keeps_nothing(conversation_id) or (params and params.model):
            return params, None
        try:
            settings = await self._conversations.settings(request.caller, conversation_id)
        except StoreUnavailable as exc:
            reason = f"the conversation's settings could not be read: {exc}"
            raise self.failed(reason, ErrorCode.SERVER_UNAVAILABLE, via=via) from None
        model = settings.get("model")
        if model is None:
            return params, None
        return (params or SendParams()).model_copy(update={"model": model}), model

    async def _open_budget(self, config: AgentConfig, request: TurnRequest, via: str) -> TurnBudget:
        """The turn's budgets (`spending.guard`), or the failure of a spent or malformed one."""
        try:
            return await self._budgets.open(config, request.caller, request.call_meta)
        except BadChainBudget as exc:
            raise self.failed(exc, ErrorCode.INVALID_ARGUMENTS, via=via) from None
        except BudgetExceeded as exc:
            raise self.failed(exc, ErrorCode.BUDGET_EXCEEDED, via=via) from None
        except StoreUnavailable as exc:
            raise self.failed(
                f"the budget's spend could not be read: {exc}", ErrorCode.SERVER_UNAVAILABLE, via=via
            ) from None

    async def _turn(
        self,
        generation: Generation,
        request: TurnRequest,
        turn: Turn,
        user: UserMessage,
        checked: str | None,
        via: str,
        history: list[Message] | None,
    ) -> Reply:
        choice = turn.choice
        model = choice.model if choice is not None else generation.config.model
        appended = bool(choice and choice.system_append)
        self._metrics.send_message_turns_total.labels(
            self._agent, model, "true" if appended else "false"
        ).inc()
        if model != generation.config.model or appended:  # the call chose: who chose what is audited
            audit_turn(self._agent, model, len(choice.system_append) if choice is not None else 0)
        reply: Reply | None = None
        # Scaling's activity signal (docs/operator.md "Scaling"): every protocol's turn passes here.
        self._last_turn.set_to_current_time()
        try:
            with self._inflight.track():
                reply = await self._conversations.send(
                    generation.loop, turn, user, conversation_id=checked, session_id=request.session_id,
                    history=history,
                )  # fmt: skip
        except (LLMError, MaxIterationsExceeded, BudgetExceeded, StepFailed, WorkflowFailed) as exc:
            failure = failure_of(exc)
            assert failure is not None  # each of these is a failure of the turn's own work
            raise self.failed(failure.message, ErrorCode(failure.code), via=via) from None
        except StoreUnavailable as exc:
            raise self.failed(
                f"the conversation was not kept: {exc}", ErrorCode.SERVER_UNAVAILABLE, via=via
            ) from None
        except tuple(kind for kind, _ in _FAILURES) as exc:
            code = next(code for kind, code in _FAILURES if isinstance(exc, kind))
            refused = isinstance(exc, ShuttingDown) and exc.refused
            raise self.failed(exc, code, via=via, processed=not refused) from None
        finally:
            # A failed turn can change the count too (one kept as failed may be a conversation's
            # first, a store may expire or evict on the way); only a finished turn that kept no
            # conversation cannot.
            if reply is None or reply.conversation_id is not None:
                await self._gauge.changed(count_changed=reply is None or reply.created)
        return reply


class TurnTimer:
    """Counts and times one turn in `pallas_send_message_total` / `_duration_seconds`.

    Every turn counts there, whichever protocol asked for it: the series measure the agent's
    work, not one protocol's calls.
    """

    def __init__(self, agent: str, metrics: RuntimeMetrics) -> None:
        self._agent = agent
        self._metrics = metrics
        self._started = time.perf_counter()

    def done(self, *, ok: bool) -> None:
        """Record the outcome and the time since the timer was made."""
        self._metrics.send_message_total.labels(self._agent, "ok" if ok else "error").inc()
        self._metrics.send_message_duration.labels(self._agent).observe(time.perf_counter() - self._started)
