"""How a workflow reaches its steps: each one a peer call through the agent's own toolbox.

A step is called exactly as the agent's model would call a peer (`ToolBox.call` on the peer's
`send_message`), so everything that follows a peer call follows a step: the caller's bearer, the
call path and its depth limit, budgets charged and passed on, approvals relayed to the caller,
the audit line, metrics and a trace span per step, the step's own progress and streamed text
relayed (`{step}/send_message: …`). Nothing of the peer call is repeated here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pallas_api.errors import ErrorCode
from pallas_api.fields import ResponseFormat
from pallas_runtime.agent.toolbox import OfferedTool, ToolBox
from pallas_runtime.agent.turn import Turn
from pallas_runtime.downstream.content import text_of
from pallas_runtime.downstream.peer_agent import SEND_MESSAGE
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    Message,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
)
from pallas_runtime.spending import guard as spending

Complete = Callable[[str, Sequence[Message], ResponseFormat | None], Awaitable[Completion]]
"""One LLM call of the workflow agent's own model: (system, messages, responseFormat) → completion."""


class StepFailed(Exception):
    """A step failed and so did the workflow; the message names the step and its error code."""

    def __init__(self, step: str, code: ErrorCode, reason: str) -> None:
        super().__init__(f"workflow step {step!r} failed ({code.value}): {reason}")
        self.step = step
        self.code = code


class WorkflowFailed(Exception):
    """The workflow cannot go on for a reason of its own (no route fits); `code` says which kind."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_ARGUMENTS) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Answer:
    """One step's answer."""

    step: str
    text: str


@dataclass(slots=True)
class Steps:
    """The steps of one workflow turn, listed once at its start, and the way to call them."""

    tools: ToolBox
    turn: Turn
    offered: dict[str, OfferedTool]
    complete: Complete
    """The workflow agent's own model (for router and planner), with its budgets and metrics."""
    instruction: str = ""
    """The workflow agent's instruction (its router's or planner's system prompt)."""
    calls: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    """Every step called so far and what it answered, in the order the answers came."""

    @classmethod
    async def open(cls, tools: ToolBox, turn: Turn, complete: Complete, instruction: str) -> Steps:
        """The steps reachable for this turn's caller (listed with its bearer)."""
        return cls(tools, turn, await tools.offered(turn.credential), complete, instruction)

    def _entry(self, step: str) -> OfferedTool | None:
        return next(
            (e for e in self.offered.values() if e.source.name == step and e.tool.name == SEND_MESSAGE), None
        )

    def menu(self, steps: Sequence[str]) -> str:
        """The steps a model chooses from, one a line with what each says it does."""
        lines = []
        for step in steps:
            entry = self._entry(step)
            lines.append(f"- {step}: {(entry.tool.description if entry else '') or '(no description)'}")
        return "\n".join(lines)

    async def ask(self, step: str, message: str) -> Answer:
        """Send `message` to `step` and return its answer.

        Raises:
            StepFailed: the step is unreachable or answered with an error (its code kept).
            BudgetExceeded: the turn's budget is spent before the step starts.
        """
        await spending.before_llm_call(self.turn.budget, self.turn.progress)
        entry = self._entry(step)
        if entry is None:
            raise StepFailed(step, ErrorCode.SERVER_UNAVAILABLE, "the agent could not be reached")
        name = next(n for n, e in self.offered.items() if e is entry)
        call = ToolCall(f"step-{len(self.calls) + 1}-{step}", name, {"message": message})
        outcome = await self.tools.call(entry, call.arguments, self.turn)
        self.calls.append((call, ToolResult(call.id, name, outcome.content, outcome.is_error)))
        text = text_of(outcome.content)
        if outcome.is_error:
            raise StepFailed(step, outcome.code or ErrorCode.SERVER_UNAVAILABLE, text)
        return Answer(step, text)

    async def ask_all(self, steps: Sequence[str], message: str) -> list[Answer | StepFailed]:
        """`message` to every step at once; each one's answer or failure, in `steps`' order.

        Cancelling the caller cancels every step still running (they are one gather).
        """

        async def one(step: str) -> Answer | StepFailed:
            try:
                return await self.ask(step, message)
            except StepFailed as failed:
                return failed
            except spending.BudgetExceeded as exc:
                return StepFailed(step, ErrorCode.BUDGET_EXCEEDED, str(exc))

        tasks = [asyncio.ensure_future(one(step)) for step in steps]
        done = 0
        try:
            for finished in asyncio.as_completed(tasks):
                if isinstance(await finished, Answer):
                    done += 1
                    await self.stage(f"parallel: {done} of {len(steps)} answered")
        finally:
            for task in tasks:
                task.cancel()
        return [task.result() for task in tasks]

    def transcript(self) -> list[Message]:
        """The steps as the turn keeps them: each call and its result, as a peer call of a model's.

        So the history (`<agent>_history`: `[tool call] writer__send_message {"message": …}`,
        `[tool result] …`) and the result's tool calls show what the workflow did.
        """
        kept: list[Message] = []
        for call, result in self.calls:
            kept += [AssistantMessage("", (call,)), ToolResultsMessage((result,))]
        return kept

    async def stage(self, message: str) -> None:
        """Tell the caller where the workflow is (`chain a → b: step 2/2 b…`)."""
        await self.turn.progress.workflow(message)


def headed(answers: Sequence[Answer]) -> str:
    """Answers one after the other, each headed by its agent's name."""
    return "\n\n".join(f"## {a.step}\n{a.text}" for a in answers)
