"""The approval gate of `ToolBox.call`: a call the spec marks waits for the caller's yes.

A server's `requireApproval` (`pallas_api.approval`) names the tools, by glob or by the server's
`destructiveHint` annotation, whose calls the caller must approve. Such a call asks the turn's
approver (`approval.question`), bounded by the policy's `timeoutSeconds`; while it waits the
caller's progress shows `{server}/{tool}: awaiting approval`. Each decision is one audit line
(`approval of {server}/{tool}: APPROVED|REJECTED|TIMEOUT|UNAVAILABLE`). Anything but APPROVED
becomes the call's error result, which the model reads and can react to (the turn goes on):
REJECTED and UNAVAILABLE with code DENIED_BY_POLICY, TIMEOUT with TIMEOUT, each with the reason.
A turn cancelled or drained while it waits stops waiting at once: the question is abandoned.
A turn has at most `MAX_PENDING_QUESTIONS` questions waiting at once; a call beyond them is
refused unasked (UNAVAILABLE, DENIED_BY_POLICY), so a model cannot flood its caller with them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from pallas_api.approval import MAX_PENDING_QUESTIONS, ApprovalPolicy
from pallas_api.config import AgentConfig
from pallas_api.errors import ErrorCode
from pallas_runtime.agent.audit import AUDIT, Outcome, audit_tool_call
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.approval.question import (
    Answer,
    ApprovalUnavailable,
    Approver,
    Question,
    answer_of,
)
from pallas_runtime.downstream.source import RemoteTool, ToolOutcome
from pallas_runtime.messages import TextPart


def audit_approval(agent: str, server: str, tool: str, answer: Answer, why: str, seconds: float) -> None:
    """One audit line for one decision: who would call what, why it asked, the verdict and reason."""
    waited_ms = round(seconds * 1000, 1)
    fields: dict[str, object] = {
        "agent": agent,
        "server": server,
        "tool": tool,
        "approval": answer.verdict,
        "why": why,
        "latency_ms": waited_ms,
    }
    if answer.reason:
        fields["reason"] = answer.reason
    because = f" ({answer.reason})" if answer.reason else ""
    AUDIT.info(
        "approval of %s/%s: %s after %.0f ms%s",
        server,
        tool,
        answer.verdict,
        waited_ms,
        because,
        extra=fields,
    )


class ApprovalGate:
    """Which calls of one agent need approval, and asking for it."""

    def __init__(self, config: AgentConfig) -> None:
        self._agent = config.name
        self._policies: dict[str, ApprovalPolicy] = {
            s.name: s.require_approval for s in config.servers if s.require_approval is not None
        }
        self._pending: dict[int, int] = {}
        """Questions waiting, by the id of the turn's approver (one per turn; kept while asked)."""

    def needs(self, tool: RemoteTool) -> tuple[ApprovalPolicy, str] | None:
        """The policy and the reason a call of `tool` needs approval, or None."""
        policy = self._policies.get(tool.source)
        if policy is None:
            return None
        why = policy.reason(tool.name, destructive=tool.destructive)
        return (policy, why) if why is not None else None

    async def check(
        self,
        tool: RemoteTool,
        arguments: Mapping[str, Any],
        progress: ProgressReporter | None,
        approver: Approver,
    ) -> ToolOutcome | None:
        """None when the call may run (no approval needed, or `approver` approved); else its error result."""
        needed = self.needs(tool)
        if needed is None:
            return None
        policy, why = needed
        question = Question(self._agent, tool.source, tool.name, arguments, why)
        if progress is not None:
            await progress.awaiting_approval(tool.source, tool.name)
        started = time.perf_counter()
        turn = id(approver)
        waiting = self._pending.get(turn, 0)
        if waiting >= MAX_PENDING_QUESTIONS:
            answer = Answer(
                "UNAVAILABLE",
                f"{waiting} approval questions of this turn are waiting already (at most "
                f"{MAX_PENDING_QUESTIONS} at once); call it again once they are answered",
            )
        else:
            self._pending[turn] = waiting + 1
            try:
                answer = await self._ask(question, policy, approver)
            finally:
                left = self._pending.pop(turn) - 1
                if left:
                    self._pending[turn] = left
        elapsed = time.perf_counter() - started
        audit_approval(self._agent, tool.source, tool.name, answer, why, elapsed)
        if answer.verdict == "APPROVED":
            return None
        qualified, reason = tool.qualified_name, answer.reason
        code = ErrorCode.TIMEOUT if answer.verdict == "TIMEOUT" else ErrorCode.DENIED_BY_POLICY
        text = {
            "TIMEOUT": f"no approval to call {qualified} within {policy.timeout_seconds:g}s",
            "REJECTED": f"the caller rejected calling {qualified}: {reason}",
        }.get(answer.verdict, f"{qualified} needs the caller's approval: {reason}")
        outcome: Outcome = "TIMEOUT" if answer.verdict == "TIMEOUT" else "DENY"
        audit_tool_call(
            self._agent, tool.source, tool.name, outcome, elapsed, f"approval {answer.verdict}", code
        )
        if progress is not None:
            await progress.tool_finished(tool.source, tool.name, ok=False)
        return ToolOutcome((TextPart(f"{text}; the tool was not run"),), is_error=True, code=code)

    @staticmethod
    async def _ask(question: Question, policy: ApprovalPolicy, approver: Approver) -> Answer:
        """The caller's answer, within the policy's time."""
        try:
            async with asyncio.timeout(policy.timeout_seconds):
                return answer_of(await approver.elicit(question.form()))
        except TimeoutError:
            return Answer("TIMEOUT", f"no answer within {policy.timeout_seconds:g}s")
        except ApprovalUnavailable as exc:
            return Answer("UNAVAILABLE", str(exc))
