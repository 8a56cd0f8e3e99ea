"""Audit lines: one per tool call, and one per turn whose call chose its model or system prompt.

Each tool call a model makes: which agent called which tool, and how it ended.

Logger `pallas.audit`, at INFO: `agent`, `server` (the downstream MCP server or peer agent),
`tool`, `outcome`, `latency_ms` and, for a failure, its `code` as fields, and a readable message.
Arguments and results are never logged: they carry users' data. Outcomes:

- `ALLOW`: the policy allowed the call and the tool answered;
- `DENY`: the agent may not call it (`spec.tools` policy) or it is no tool offered to the agent;
- `ERROR`: the call failed, the tool answered with an error, or the model's arguments were unusable;
- `TIMEOUT`: no answer within the server's `timeoutSeconds`.

A call that waits for the caller's approval has one more line, the decision
(`agent.approvals.audit_approval`: APPROVED, REJECTED, TIMEOUT or UNAVAILABLE); one that is not
run then has its DENY or TIMEOUT line here with `reason: approval <verdict>`.
"""

from __future__ import annotations

import logging
from typing import Literal

from pallas_api.errors import ErrorCode

AUDIT = logging.getLogger("pallas.audit")
Outcome = Literal["ALLOW", "DENY", "ERROR", "TIMEOUT"]


def audit_tool_call(
    agent: str,
    server: str,
    tool: str,
    outcome: Outcome,
    seconds: float,
    reason: str = "",
    code: ErrorCode | None = None,
) -> None:
    """Log one tool call; `reason` says why a call was refused before reaching the server.

    `code` is the failure's machine-readable code (`pallas_api.errors`), as a caller of the agent
    would get it; the model itself only reads the text.
    """
    latency_ms = round(seconds * 1000, 1)
    fields: dict[str, object] = {
        "agent": agent,
        "server": server,
        "tool": tool,
        "outcome": outcome,
        "latency_ms": latency_ms,
    }
    if reason:
        fields["reason"] = reason
    if code is not None:
        fields["code"] = code.value
    where = f"{server}/{tool}" if server else tool
    because = f" ({reason})" if reason else ""
    AUDIT.info("tool call %s: %s in %.0f ms%s", where, outcome, latency_ms, because, extra=fields)


def audit_turn(agent: str, model: str, system_append_chars: int) -> None:
    """Log the start of a turn whose call chose a model or added to the system prompt.

    The addition's text is never logged (it is the caller's); its size says that there was one.
    """
    fields: dict[str, object] = {
        "agent": agent,
        "model": model,
        "system_append": system_append_chars > 0,
        "system_append_chars": system_append_chars,
    }
    appended = f", system prompt +{system_append_chars} chars" if system_append_chars else ""
    AUDIT.info("turn on model %s%s", model, appended, extra=fields)
