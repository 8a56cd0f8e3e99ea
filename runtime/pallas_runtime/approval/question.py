"""What an approval asks, how an answer reads, and whom the turn asks (its `Approver`).

The question is an MCP elicitation form (`elicitation/create`, mode `form`) with two fields,
`approve` (boolean, required) and `reason` (text), so that any client that renders forms can
answer it and a relaying agent can pass it on unchanged. The answer is one of:

- `APPROVED`: the client accepted with `approve: true`;
- `REJECTED`: it accepted with `approve: false`, declined or cancelled;
- `TIMEOUT`: no answer within the server's `requireApproval.timeoutSeconds`;
- `UNAVAILABLE`: there is nobody to ask (the caller's client does not support elicitation, or
  the turn came over A2A); the reason says which.

The turn's approver is set by the protocol edge that serves the turn (the MCP `send_message`
tool, the gateway's `execute_tool`): it is the request's own channel back to its client, and it
travels in the turn (`agent.turn.Turn.approver`) to the tool calls the turn makes and to the
peer calls that relay their own questions to it. A turn without one gets `UNAVAILABLE`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import mcp_types

Verdict = Literal["APPROVED", "REJECTED", "TIMEOUT", "UNAVAILABLE"]

APPROVE_FIELD = "approve"
REASON_FIELD = "reason"
SCHEMA: mcp_types.ElicitRequestedSchema = {
    "type": "object",
    "properties": {
        APPROVE_FIELD: {"type": "boolean", "title": "Approve", "description": "Run the tool call?"},
        REASON_FIELD: {"type": "string", "title": "Reason", "description": "Why (optional)."},
    },
    "required": [APPROVE_FIELD],
}
QUESTION_META = "pallas.dev/approval"
"""`_meta` key of the elicitation: the question's parts as data (agent, server, tool, reason, the
full `arguments` and their `argumentsSha256`), for clients that show more than the message."""
ARGUMENTS_SHOWN = 400
"""Characters of the arguments' JSON the question's message shows whole; longer ones are shown
as a digest: every argument by name, each value cut in its middle."""
VALUE_SHOWN = 60
"""Characters of one argument's value a digest shows at most (its start and its end)."""
NAMES_SHOWN = 20
"""Arguments a digest names at most (the rest are counted)."""


class ApprovalUnavailable(Exception):
    """Nobody can be asked; the text says why (it becomes the DENIED_BY_POLICY reason)."""


@dataclass(frozen=True, slots=True)
class Question:
    """One tool call waiting for the caller's approval."""

    agent: str
    """The agent that would make the call."""
    server: str
    tool: str
    arguments: Mapping[str, Any]
    why: str
    """What makes the call need approval: `requireApproval.tools <glob>` or `destructiveHint`."""

    def summary(self) -> str:
        """The arguments as compact JSON when short; else a digest naming every argument.

        A cut at a fixed length hid what came after a padded argument (`PRODUCTION-DATABASE`
        behind 400 characters of filler, approved unseen). The digest shows each argument by
        name with its value's start and end, and the fingerprint of the full arguments, which
        `_meta` carries whole.
        """
        text = _json(self.arguments)
        if len(text) <= ARGUMENTS_SHOWN:
            return text
        items = list(self.arguments.items())
        shown = ", ".join(f"{_cut(_json(str(k)))}: {_cut(_json(v))}" for k, v in items[:NAMES_SHOWN])
        more = f", and {len(items) - NAMES_SHOWN} more arguments" if len(items) > NAMES_SHOWN else ""
        return (
            f"{{{shown}{more}}} (a digest of {len(text):,} characters of arguments, sha256 "
            f"{_fingerprint(text)[:16]}; the full arguments are in _meta {QUESTION_META}.arguments)"
        )

    def form(self) -> mcp_types.ElicitRequestFormParams:
        """The elicitation that asks it."""
        message = (
            f"Agent {self.agent} wants to call {self.server}/{self.tool} with {self.summary()} "
            f"({self.why}). Approve?"
        )
        arguments = dict(self.arguments)
        parts = {
            "agent": self.agent,
            "server": self.server,
            "tool": self.tool,
            "why": self.why,
            "arguments": arguments,
            "argumentsSha256": _fingerprint(_json(arguments)),
        }
        meta = cast(mcp_types.RequestParamsMeta, {QUESTION_META: parts})
        return mcp_types.ElicitRequestFormParams(message=message, requested_schema=SCHEMA, _meta=meta)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cut(text: str) -> str:
    """`text` cut in its middle to `VALUE_SHOWN` characters, saying how long it was."""
    if len(text) <= VALUE_SHOWN:
        return text
    head, tail = VALUE_SHOWN * 2 // 3, VALUE_SHOWN // 3
    return f"{text[:head]}…[{len(text) - head - tail:,} characters]…{text[-tail:]}"


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of one question."""

    verdict: Verdict
    reason: str = ""


def answer_of(result: mcp_types.ElicitResult) -> Answer:
    """The caller's answer read from its elicitation result."""
    content = result.content or {}
    reason = content.get(REASON_FIELD)
    said = reason.strip() if isinstance(reason, str) else ""
    if result.action == "accept":
        if content.get(APPROVE_FIELD) is True:
            return Answer("APPROVED", said)
        return Answer("REJECTED", said or "not approved")
    if result.action == "decline":
        return Answer("REJECTED", said or "declined")
    return Answer("REJECTED", said or "cancelled")


class Approver(Protocol):
    """The turn's channel to whoever approves its tool calls."""

    async def elicit(self, params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        """Ask; the client's result as it came.

        Raises:
            ApprovalUnavailable: nobody can be asked (the text says why).
        """
        ...


class Nobody:
    """The approver of a turn whose caller cannot be asked; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def elicit(self, params: mcp_types.ElicitRequestFormParams) -> mcp_types.ElicitResult:
        """Never asks.

        Raises:
            ApprovalUnavailable: always, with the reason.
        """
        raise ApprovalUnavailable(self.reason)


NO_CHANNEL = Nobody("this turn has no channel to its caller (only MCP clients can be asked)")
"""The approver of a turn whose edge gave it none (an A2A turn)."""
