"""Machine-readable codes of agents' tool errors (docs/api.md §3).

An error result of an agent's tool (`send_message`, its alias, `list_conversations`,
`delete_conversation`, an unknown tool) keeps its human text in `content`, unchanged, and
carries the code in its structured part:

    {"isError": true, "content": [{"type": "text", "text": "the language model call failed: …"}],
     "structuredContent": {"error": {"code": "LLM_ERROR", "message": "the language model call failed: …",
                                     "retryable": false, "category": "upstream"}}}

`retryable` says whether sending the same call again may succeed without changing it (the codes
of `RETRYABLE`): the failure was the agent's or its store's state, not the call.

The same codes name the failures of tool calls inside an agent's loop (in its log lines: the
model reads the text, since neither provider's wire has a field for a code). The vocabulary is
the MCP gateway's (`DENIED_BY_POLICY`, `TOOL_NOT_FOUND`, `SERVER_UNAVAILABLE`, `TIMEOUT`) plus the
agent's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final, Literal


class ErrorCode(StrEnum):
    """What kind of failure a tool error is."""

    DENIED_BY_POLICY = "DENIED_BY_POLICY"
    """The agent's tool policy (`spec.tools`) does not allow the tool."""
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    """No tool of that name."""
    NOT_FOUND = "NOT_FOUND"
    """What the call names is not there: a conversation to delete (seed 004's "Session not found",
    an upstream error)."""
    SERVER_UNAVAILABLE = "SERVER_UNAVAILABLE"
    """Something the call needs cannot be reached: a downstream server, the conversation store,
    or the agent itself (shutting down)."""
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    """The arguments are malformed or not acceptable (message, images, conversation, params)."""
    TIMEOUT = "TIMEOUT"
    """A downstream call, or the wait for the conversation's previous turn, ran out of time."""
    LLM_ERROR = "LLM_ERROR"
    """The language model call failed after retries, or answered unusably."""
    MAX_ITERATIONS = "MAX_ITERATIONS"
    """The model kept calling tools past `maxIterations`."""
    LOOP_DETECTED = "LOOP_DETECTED"
    """An agent-to-agent call would reach an agent already in the call's path."""
    MAX_DEPTH = "MAX_DEPTH"
    """An agent-to-agent call would make the chain of agents longer than `maxDepth`."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """A budget of the agent, of the caller, or of the root caller of a delegated call is spent
    for its window (`spec.budgets`): the message says what was spent, the limit, and when it
    resets. Not retryable before then."""
    AGENT_SHUTTING_DOWN = "AGENT_SHUTTING_DOWN"
    """The agent is stopping (a rollout, a scale-down, a restart): its drain ran out while the
    turn was running (the turn is kept in its conversation as failed, with this code), or the
    call came after it. Another replica, or the agent once it is back, takes the call again."""


Category = Literal["request", "config", "upstream", "internal"]
"""Whose failure an error is, in seed 004's kinds (its BridgeError's `config`, `upstream`,
`internal`) and the registry's `request`: the call itself (`request`), what the deployment
configured for the agent (`config`: its policy, budgets, `maxIterations`), something the agent
relies on (`upstream`: a model, a server, a peer, the store, a conversation), or the agent's own
state (`internal`: it is stopping)."""

CATEGORIES: Final[Mapping[ErrorCode, Category]] = {
    ErrorCode.DENIED_BY_POLICY: "config",
    ErrorCode.TOOL_NOT_FOUND: "request",
    ErrorCode.NOT_FOUND: "upstream",
    ErrorCode.SERVER_UNAVAILABLE: "upstream",
    ErrorCode.INVALID_ARGUMENTS: "request",
    ErrorCode.TIMEOUT: "upstream",
    ErrorCode.LLM_ERROR: "upstream",
    ErrorCode.MAX_ITERATIONS: "config",
    ErrorCode.LOOP_DETECTED: "request",
    ErrorCode.MAX_DEPTH: "request",
    ErrorCode.BUDGET_EXCEEDED: "config",
    ErrorCode.AGENT_SHUTTING_DOWN: "internal",
}
"""Each code's category (`error_content`'s `category`)."""

RETRYABLE = frozenset({ErrorCode.AGENT_SHUTTING_DOWN, ErrorCode.SERVER_UNAVAILABLE, ErrorCode.TIMEOUT})
"""Codes of failures a caller may retry unchanged: the agent was stopping, something it needs was
unreachable, or the conversation was busy."""

DRAINING_RPC_CODE = -32050
"""The JSON-RPC error code of a new MCP session refused by a draining agent (HTTP 503 with
`Retry-After`; `error.data.code` is `AGENT_SHUTTING_DOWN`). A server error of the range JSON-RPC
leaves to implementations, none that MCP uses."""


def error_content(code: ErrorCode, message: str, *, processed: bool = True) -> dict[str, Any]:
    """The structured part of an error result: `{"error": {"code", "message", "retryable", "category"}}`.

    `processed=False` adds `"processed": false`: the agent refused the call before any of it ran
    (a stopping agent's refusal), so a client may send it again, unchanged, without running
    anything twice.
    """
    error: dict[str, Any] = {
        "code": code.value,
        "message": message,
        "retryable": code in RETRYABLE,
        "category": CATEGORIES[code],
    }
    if not processed:
        error["processed"] = False
    return {"error": error}


def unprocessed(structured: object) -> bool:
    """Whether an error result's structured part says none of the call ran (`"processed": false`)."""
    error = structured.get("error") if isinstance(structured, Mapping) else None
    return isinstance(error, Mapping) and error.get("processed") is False


def error_code_of(structured: object) -> ErrorCode | None:
    """The code in an error result's structured part, or None when it has none we know."""
    error = structured.get("error") if isinstance(structured, Mapping) else None
    code = error.get("code") if isinstance(error, Mapping) else None
    try:
        return ErrorCode(code) if isinstance(code, str) else None
    except ValueError:
        return None
