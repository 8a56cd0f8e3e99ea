"""The in-process store: a pod's default, lost on restart. Bounded in count, bytes and length.

Least recently used conversations go first when the count or the bytes are over.
A conversation with a turn in progress is never evicted, so a finished turn is always stored.
A conversation that alone weighs more than the whole byte bound loses its oldest turns instead.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pallas_api.fields import DEFAULT_HISTORY_BYTES
from pallas_runtime.conversations.history import first_kept, role_of
from pallas_runtime.conversations.locks import KeyedLocks
from pallas_runtime.conversations.model import ConversationBusy, ConversationKey, ThreadInfo, Turn
from pallas_runtime.conversations.weight import SizedLru, first_within, footprint
from pallas_runtime.messages import Message


@dataclass
class _Conversation:
    title: str
    messages: list[Message] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    """Each message's `footprint`, measured once when it was stored."""
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    touched: float = field(default_factory=time.monotonic)
    settings: dict[str, str] | None = None
    """What `create_conversation` chose; None when a turn started it."""


@dataclass
class _MemoryTurn:
    store: MemoryStore
    key: ConversationKey
    history: Sequence[Message]

    async def commit(self, messages: Sequence[Message], title: str) -> None:
        self.store._commit(self.key, messages, title)


class MemoryStore:
    """Conversations in a dict: least recently used dropped beyond `max_conversations` or `max_bytes`."""

    kind = "memory"

    def __init__(
        self,
        *,
        max_conversations: int,
        max_messages: int,
        max_bytes: int = DEFAULT_HISTORY_BYTES,
        ttl_seconds: float | None = None,
        turn_wait: float = 600.0,
    ) -> None:
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._ttl = ttl_seconds
        self._turn_wait = turn_wait
        self._items: SizedLru[ConversationKey, _Conversation] = SizedLru(
            max_items=max_conversations, max_bytes=max_bytes
        )
        self._counts: Counter[str] = Counter()
        """Conversations kept per agent (expired ones included until they are dropped)."""
        self._locks = KeyedLocks()

    async def start(self) -> None:
        """Nothing to connect."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def _expired(self, conversation: _Conversation) -> bool:
        return self._ttl is not None and time.monotonic() - conversation.touched > self._ttl

    @property
    def bytes(self) -> int:
        """What the kept conversations weigh (see `weight.footprint`)."""
        return self._items.bytes

    def _get(self, key: ConversationKey) -> _Conversation | None:
        conversation = self._items.peek(key)
        if conversation is not None and self._expired(conversation) and not self._locks.held(key):
            self._forget(key)
            return None
        return conversation

    @asynccontextmanager
    async def turn(self, key: ConversationKey) -> AsyncIterator[Turn]:
        """Hold the conversation for one turn; see `ConversationStore.turn`."""
        try:
            async with self._locks.hold(key, self._turn_wait):
                conversation = self._get(key)
                yield _MemoryTurn(self, key, list(conversation.messages) if conversation else [])
        except TimeoutError:
            raise ConversationBusy(
                f"conversation {key.id!r} is busy: its previous turn did not finish within "
                f"{self._turn_wait:g}s"
            ) from None

    def _commit(self, key: ConversationKey, messages: Sequence[Message], title: str) -> None:
        conversation = self._get(key)
        if conversation is None:
            conversation = _Conversation(title)
            self._counts[key.agent] += 1
        conversation.messages.extend(messages)
        conversation.sizes.extend(footprint(m) for m in messages)
        roles = [role_of(m) for m in conversation.messages]
        cut = max(
            first_kept(roles, self._max_messages), first_within(roles, conversation.sizes, self._max_bytes)
        )
        del conversation.messages[:cut]
        del conversation.sizes[:cut]
        conversation.updated_at = datetime.now(UTC)
        conversation.touched = time.monotonic()
        self._items.put(key, conversation, sum(conversation.sizes))
        # Oldest first, skipping the ones a turn holds; the walk stops as soon as both bounds
        # hold, so a turn pays for what it evicts, not for every conversation kept.
        for evicted in self._items.evict(keep=self._locks.held):
            self._counts[evicted.agent] -= 1

    async def create(self, key: ConversationKey, settings: Mapping[str, str], title: str) -> None:
        """Keep an empty conversation with its settings (ids are new: nothing is replaced)."""
        if self._get(key) is None:
            self._counts[key.agent] += 1
        self._items.put(key, _Conversation(title, settings=dict(settings)), 0)
        for evicted in self._items.evict(keep=lambda k: k == key or self._locks.held(k)):
            self._counts[evicted.agent] -= 1

    async def settings(self, key: ConversationKey) -> dict[str, str] | None:
        """What the conversation was created with."""
        conversation = self._get(key)
        return dict(conversation.settings) if conversation is not None and conversation.settings else None

    def _forget(self, key: ConversationKey) -> bool:
        if self._items.pop(key) is None:
            return False
        self._counts[key.agent] -= 1
        return True

    async def history(self, key: ConversationKey) -> list[Message] | None:
        """The stored messages, or None."""
        conversation = self._get(key)
        if conversation is None:
            return None
        self._items.get(key)  # now the most recently used
        return list(conversation.messages)

    async def threads(self, agent: str, owner: str, only: Collection[str] | None = None) -> list[ThreadInfo]:
        """The caller's conversations (those of `only`, when given), most recent first."""
        wanted = None if only is None else set(only)
        out = [
            ThreadInfo(key.id, c.title, c.updated_at, len(c.messages))
            for key, c in self._items.items()
            if key.agent == agent
            and key.owner == owner
            and (wanted is None or key.id in wanted)
            and self._get(key) is not None
        ]
        return sorted(out, key=lambda t: t.updated_at, reverse=True)

    async def delete(self, key: ConversationKey) -> bool:
        """Forget one conversation."""
        return self._forget(key)

    async def count(self, agent: str) -> int:
        """Conversations kept for `agent`; expired ones (as `history` sees them) are not counted.

        Runs after every turn that creates a conversation: without a TTL it is a lookup; with one,
        a pass with a comparison per conversation (the lock table is asked only about the rare
        expired one).
        """
        if self._ttl is None:
            return self._counts[agent]
        oldest = time.monotonic() - self._ttl
        return sum(
            1
            for key, conversation in self._items.items()
            if key.agent == agent and (conversation.touched >= oldest or self._locks.held(key))
        )

    async def check(self) -> str | None:
        """Always usable."""
        return None
