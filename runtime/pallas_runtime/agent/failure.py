"""Why a turn's own work failed, as its caller hears it and its conversation keeps it.

A turn that ran and failed (its model call failed, it ran out of rounds or budget, a workflow
step failed) is kept in its conversation as its user message and a `TurnFailure` with the same
code and text its caller gets: the thread stays the record of what was asked and what became of
it, and no model is ever sent the failure. A request refused before it ran (a bad `toolChoice`,
a busy conversation) is not a turn of the conversation and is not kept.
"""

from __future__ import annotations

from pallas_api.errors import ErrorCode
from pallas_runtime.agent.loop import MaxIterationsExceeded
from pallas_runtime.agent.workflow import StepFailed, WorkflowFailed
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TurnFailure
from pallas_runtime.spending.guard import BudgetExceeded

_CODES: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (MaxIterationsExceeded, ErrorCode.MAX_ITERATIONS),
    (BudgetExceeded, ErrorCode.BUDGET_EXCEEDED),
)


def failure_of(exc: BaseException) -> TurnFailure | None:
    """The record a turn that failed with `exc` leaves (None: `exc` is no failure of the turn's work)."""
    if isinstance(exc, LLMError):
        return TurnFailure(ErrorCode.LLM_ERROR.value, f"the language model call failed: {exc}")
    if isinstance(exc, StepFailed | WorkflowFailed):
        return TurnFailure(exc.code.value, str(exc))
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return TurnFailure(code.value, str(exc))
    return None
