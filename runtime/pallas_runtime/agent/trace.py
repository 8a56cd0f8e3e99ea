"""The tool calls of one turn as a caller may see them: names, arguments and (shortened) results.

A turn's tool traffic stays inside the agent unless the caller asks for it (`send_message` with
`_meta["pallas.dev/toolCalls"]: true`, `pallas_api.names.TOOL_CALLS_META`, what `pallas chat`
sends): then the result's `_meta` under the same key lists every call the model made, in
order, so a chat client can show what the agent did, as mcpctl's REPL does. Results are cut to
`RESULT_TEXT_LIMIT` characters: they are for a person to glance at, and a whole tool result
can be megabytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pallas_runtime.messages import AssistantMessage, ContentPart, ImagePart, Message, ToolResultsMessage

RESULT_TEXT_LIMIT = 2000


def result_text(content: Sequence[ContentPart]) -> str:
    """A tool result's text for a person, images named, cut to `RESULT_TEXT_LIMIT` characters."""
    parts = [p.text if not isinstance(p, ImagePart) else f"[image {p.mime_type}]" for p in content]
    text = "\n".join(parts)
    if len(text) <= RESULT_TEXT_LIMIT:
        return text
    return f"{text[:RESULT_TEXT_LIMIT]}… ({len(text) - RESULT_TEXT_LIMIT} more characters)"


def tool_trace(turn: Sequence[Message]) -> list[dict[str, Any]]:
    """Every tool call of `turn`: `{"name", "arguments", "isError", "result"}` in call order.

    `name` is the tool as the model called it (`<server>__<tool>`); a call whose arguments were
    not a JSON object has `argumentsError` instead of arguments; `isError` and `result` are
    missing for a call with no result (a turn cut short).
    """
    results = {r.call_id: r for m in turn if isinstance(m, ToolResultsMessage) for r in m.results}
    trace: list[dict[str, Any]] = []
    for message in turn:
        if not isinstance(message, AssistantMessage):
            continue
        for call in message.tool_calls:
            entry: dict[str, Any] = {"name": call.name, "arguments": call.arguments}
            if call.arguments_error is not None:
                entry["argumentsError"] = call.arguments_error
            result = results.get(call.id)
            if result is not None:
                entry["isError"] = result.is_error
                entry["result"] = result_text(result.content)
            trace.append(entry)
    return trace


HISTORY_ARGUMENTS_LIMIT = 300
HISTORY_RESULT_LIMIT = 500


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def tool_activity(message: AssistantMessage | ToolResultsMessage) -> list[str]:
    """Tool calls or results as lines a person reads in the history (docs/api.md §3).

    `[tool call] argos__search {"query": "…"}`, `[tool result] argos__search: …` or
    `[tool error] argos__search: …`, each cut to a few hundred characters: the history shows what
    the agent did, not megabytes of what a tool returned.
    """
    if isinstance(message, AssistantMessage):
        lines = []
        for call in message.tool_calls:
            arguments = call.arguments_error or json.dumps(call.arguments, ensure_ascii=False)
            lines.append(f"[tool call] {call.name} {_cut(arguments, HISTORY_ARGUMENTS_LIMIT)}")
        return lines
    return [
        f"[tool {'error' if r.is_error else 'result'}] {r.name}: "
        + _cut(result_text(r.content), HISTORY_RESULT_LIMIT)
        for r in message.results
    ]
