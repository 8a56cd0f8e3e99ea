"""Conversations kept per key, bounded in count (LRU) and in length.

A conversation is keyed by the caller's `conversation_id`, else the MCP session id; without a
key nothing is kept. Turns on one conversation run one at a time (its lock), so two concurrent
`send_message` calls never interleave their messages.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from pallas_runtime.messages import AssistantMessage, Message, UserMessage


@dataclass
class Conversation:
    """One conversation's messages, and the lock that makes its turns run one at a time."""

    key: str
    messages: list[Message] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ConversationStore:
    """An LRU map of conversations; the least recently used one is dropped beyond the limit."""

    def __init__(self, max_conversations: int, max_messages: int) -> None:
        self._max_conversations = max_conversations
        self._max_messages = max_messages
        self._items: OrderedDict[str, Conversation] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Conversation | None:
        """The conversation, marked as recently used; None when unknown."""
        conversation = self._items.get(key)
        if conversation is not None:
            self._items.move_to_end(key)
        return conversation

    def open(self, key: str) -> Conversation:
        """The conversation for `key`, created when new."""
        conversation = self.get(key)
        if conversation is None:
            conversation = Conversation(key)
            self._store(conversation)
        return conversation

    def _store(self, conversation: Conversation) -> None:
        self._items[conversation.key] = conversation
        while len(self._items) > self._max_conversations:
            self._items.popitem(last=False)

    def discard(self, conversation: Conversation) -> None:
        """Drop this conversation object (not a newer one under the same key)."""
        if self._items.get(conversation.key) is conversation:
            del self._items[conversation.key]

    def clear(self, key: str) -> bool:
        """Forget one conversation; whether it existed."""
        return self._items.pop(key, None) is not None

    def extend(self, conversation: Conversation, messages: list[Message]) -> None:
        """Append a finished turn, then trim to the limit at a turn boundary.

        A conversation dropped meanwhile (evicted, or discarded after a failed turn while this
        one waited for its lock) is stored again, so a finished turn is never lost.
        """
        conversation.messages.extend(messages)
        conversation.messages[:] = trim(conversation.messages, self._max_messages)
        current = self._items.get(conversation.key)
        if current is None:
            self._store(conversation)
        elif current is conversation:
            self._items.move_to_end(conversation.key)


def trim(messages: list[Message], limit: int) -> list[Message]:
    """The newest messages within `limit`, starting at a user message.

    Cutting anywhere else could leave tool results whose calls were dropped, which providers
    reject; if no user message fits, the newest user message and what follows are kept.
    """
    if len(messages) <= limit:
        return messages
    start = len(messages) - limit
    for index in range(start, len(messages)):
        if isinstance(messages[index], UserMessage):
            return messages[index:]
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], UserMessage):
            return messages[index:]
    return [m for m in messages[start:] if isinstance(m, AssistantMessage) and not m.tool_calls]
