"""What a conversation store is: keys, thread summaries, errors and the two protocols."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pallas_runtime.messages import Message

MAX_ID_LENGTH = 256
"""Longest conversation id accepted (an id is stored and compared, never interpreted)."""


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """A conversation of one caller with one agent."""

    agent: str
    owner: str
    """The caller: `sub:<subject>` when authenticated, `anonymous` otherwise."""
    id: str


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One conversation as `list_conversations` shows it."""

    id: str
    title: str
    """The start of the first user message."""
    updated_at: datetime
    message_count: int


class StoreUnavailable(Exception):
    """The store cannot be reached or used; the message says why (never a DSN or password)."""


class ConversationBusy(Exception):
    """Another turn of the conversation did not finish within the wait."""


class TurnLost(Exception):
    """The turn's hold on its conversation expired before it finished (nothing was stored)."""


class Turn(Protocol):
    """A conversation held for one turn: its history, and the commit of the turn's messages."""

    @property
    def history(self) -> Sequence[Message]:
        """The stored messages, oldest first."""

    async def commit(self, messages: Sequence[Message], title: str) -> None:
        """Store the turn's messages in one transaction (trimmed to the agent's limit).

        `title` names a new conversation (the start of its first user message).
        """


class ConversationStore(Protocol):
    """Where an agent keeps conversations: memory, SQLite or PostgreSQL."""

    kind: str
    """`memory`, `sqlite` or `postgres` (for health messages and metrics)."""

    async def start(self) -> None:
        """Connect and migrate; an unreachable database is reported by `check`, not raised."""

    async def aclose(self) -> None:
        """Release connections."""

    def turn(self, key: ConversationKey) -> AbstractAsyncContextManager[Turn]:
        """Hold the conversation for one turn (waiting for a turn in progress).

        Leaving the block without `commit` stores nothing and leaves no empty conversation.

        Raises:
            ConversationBusy: the previous turn did not finish within the wait.
            StoreUnavailable: the store cannot be used.
        """

    async def history(self, key: ConversationKey) -> list[Message] | None:
        """The stored messages, or None when there is no such conversation."""

    async def create(self, key: ConversationKey, settings: Mapping[str, str], title: str) -> None:
        """Store a conversation before its first turn, with the settings it was created with.

        It exists (listed, deletable) with no message; a failed first turn leaves it in place.
        """

    async def settings(self, key: ConversationKey) -> dict[str, str] | None:
        """What the conversation was created with (`create`); None when it was not, or is not there."""

    async def threads(self, agent: str, owner: str, only: Collection[str] | None = None) -> list[ThreadInfo]:
        """The caller's conversations with the agent, most recently updated first.

        `only` limits them to those ids (what an anonymous session started or named).
        """

    async def delete(self, key: ConversationKey) -> bool:
        """Forget one conversation; whether it existed."""

    async def count(self, agent: str) -> int:
        """How many conversations the agent keeps (the active-conversations gauge)."""

    async def check(self) -> str | None:
        """None when usable; otherwise a short reason (for get_health)."""
