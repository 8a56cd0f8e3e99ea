"""Where a conversation may be cut, and what names it."""

from __future__ import annotations

from collections.abc import Sequence

from pallas_runtime.messages import Message, TextPart, UserMessage

TITLE_LENGTH = 80


def first_kept(roles: Sequence[str], limit: int) -> int:
    """The index of the first message to keep so at most `limit` remain, cut before a user message.

    Cutting anywhere else could leave tool results whose calls were dropped, which providers
    reject; when no user message fits in the limit, the newest user message and what follows
    are kept (one turn is never cut in half).
    """
    if len(roles) <= limit:
        return 0
    start = len(roles) - limit
    for index in range(start, len(roles)):
        if roles[index] == "user":
            return index
    for index in range(len(roles) - 1, -1, -1):
        if roles[index] == "user":
            return index
    return start


def title_of(messages: Sequence[Message]) -> str:
    """The start of the first user message's text, on one line."""
    for message in messages:
        if isinstance(message, UserMessage):
            text = " ".join(p.text for p in message.content if isinstance(p, TextPart))
            line = " ".join(text.split())
            return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"
    return ""


def role_of(message: Message) -> str:
    """`user`, `assistant` or `tool`."""
    return message.role
