"""Messages to and from JSON, for the stores that keep them outside the process."""

from __future__ import annotations

from typing import Any

from pallas_runtime.messages import (
    AssistantMessage,
    ContentPart,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    TurnFailure,
    UserMessage,
)

VERSION = 1


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    return {"image": part.data, "mime_type": part.mime_type}


def _part_from(data: dict[str, Any]) -> ContentPart:
    if "text" in data:
        return TextPart(str(data["text"]))
    return ImagePart(str(data["image"]), str(data["mime_type"]))


def _signed(signature: str | None) -> dict[str, str]:
    """A provider's reasoning token as a field, only where there is one (older rows have none)."""
    return {"signature": signature} if signature is not None else {}


def encode(message: Message) -> dict[str, Any]:
    """A JSON-ready dict of one message."""
    if isinstance(message, UserMessage):
        return {"v": VERSION, "role": "user", "content": [_part(p) for p in message.content]}
    if isinstance(message, AssistantMessage):
        calls = [
            {
                "id": c.id,
                "name": c.name,
                "arguments": c.arguments,
                "arguments_error": c.arguments_error,
                **_signed(c.signature),
            }
            for c in message.tool_calls
        ]
        return {
            "v": VERSION,
            "role": "assistant",
            "text": message.text,
            "tool_calls": calls,
            **_signed(message.signature),
        }
    if isinstance(message, TurnFailure):
        return {"v": VERSION, "role": "failure", "code": message.code, "message": message.message}
    results = [
        {
            "call_id": r.call_id,
            "name": r.name,
            "content": [_part(p) for p in r.content],
            "is_error": r.is_error,
        }
        for r in message.results
    ]
    return {"v": VERSION, "role": "tool", "results": results}


def decode(data: dict[str, Any]) -> Message:
    """The message a dict of `encode` describes.

    Raises:
        ValueError: the dict is not an encoded message (a corrupt or foreign row).
    """
    try:
        role = data["role"]
        if role == "user":
            return UserMessage(tuple(_part_from(p) for p in data["content"]))
        if role == "assistant":
            calls = tuple(
                ToolCall(
                    c["id"], c["name"], dict(c["arguments"]), c.get("arguments_error"), c.get("signature")
                )
                for c in data["tool_calls"]
            )
            return AssistantMessage(str(data["text"]), calls, signature=data.get("signature"))
        if role == "tool":
            return ToolResultsMessage(
                tuple(
                    ToolResult(
                        r["call_id"], r["name"], tuple(_part_from(p) for p in r["content"]), r["is_error"]
                    )
                    for r in data["results"]
                )
            )
        if role == "failure":
            return TurnFailure(str(data["code"]), str(data["message"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a stored message: {exc!r}") from None
    raise ValueError(f"not a stored message: role {data.get('role')!r}")
