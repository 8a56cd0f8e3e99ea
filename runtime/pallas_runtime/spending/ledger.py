"""Where spend is counted: in the process, or beside the conversations in SQLite or PostgreSQL.

A bucket is one budget's window: the agent's identity, a subject (`*` for the agent as a whole,
a caller's owner key for that caller), the window and its start. A charge adds to every bucket
it concerns with one atomic `INSERT … ON CONFLICT DO UPDATE SET tokens = tokens + …` per bucket
and reads back the totals, so replicas sharing a database never lose each other's spend and each
learns the others' at its next charge. Buckets of agents that are gone go with their
conversations (`conversations.tenancy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pallas_api.spending import Window

AGENT_SUBJECT = "*"
"""The subject of the agent as a whole (a caller's owner key is `sub:…` or `anonymous`)."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """One window of one budget of one agent."""

    agent: str
    subject: str
    window: Window
    start: datetime


@dataclass(frozen=True, slots=True)
class Spent:
    """Tokens and cost (millionths of the currency) spent in a bucket."""

    tokens: int = 0
    micros: int = 0


class Ledger(Protocol):
    """Reads and adds to buckets."""

    async def read(self, buckets: Sequence[Bucket]) -> list[Spent]:
        """What each bucket holds (nothing spent: zeros)."""
        ...

    async def add(self, buckets: Sequence[Bucket], tokens: int, micros: int) -> list[Spent]:
        """Add to every bucket at once; what each holds afterwards."""
        ...


class MemoryLedger:
    """Spend in this process only (the memory store: lost on restart, not shared by replicas)."""

    def __init__(self) -> None:
        self._spent: dict[Bucket, Spent] = {}

    async def read(self, buckets: Sequence[Bucket]) -> list[Spent]:
        """What each bucket holds."""
        return [self._spent.get(b, Spent()) for b in buckets]

    async def add(self, buckets: Sequence[Bucket], tokens: int, micros: int) -> list[Spent]:
        """Add to every bucket; old windows are dropped as new ones start."""
        totals = []
        for bucket in buckets:
            old = self._spent.get(bucket)
            if old is None:
                stale = [b for b in self._spent if b.agent == bucket.agent and b.subject == bucket.subject
                         and b.window == bucket.window]  # fmt: skip
                for b in stale:
                    del self._spent[b]
                old = Spent()
            self._spent[bucket] = new = Spent(old.tokens + tokens, old.micros + micros)
            totals.append(new)
        return totals
