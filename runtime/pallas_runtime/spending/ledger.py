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

from sqlalchemy import Connection, and_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from pallas_api.spending import Window
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.conversations.sql import SqlStore
from pallas_runtime.conversations.tables import spend

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


def _where(bucket: Bucket) -> object:
    return and_(
        spend.c.agent == bucket.agent,
        spend.c.subject == bucket.subject,
        spend.c.window == bucket.window,
        spend.c.window_start == bucket.start,
    )


class SqlLedger:
    """Spend in the conversation store's database (survives restarts, shared by replicas)."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    async def read(self, buckets: Sequence[Bucket]) -> list[Spent]:
        """What each bucket holds, in one transaction."""

        def read(connection: Connection) -> list[Spent]:
            out = []
            for bucket in buckets:
                row = connection.execute(
                    select(spend.c.tokens, spend.c.cost_micros).where(_where(bucket))  # type: ignore[arg-type]
                ).first()
                out.append(Spent(int(row.tokens), int(row.cost_micros)) if row else Spent())
            return out

        return await self._store.run(read)

    async def add(self, buckets: Sequence[Bucket], tokens: int, micros: int) -> list[Spent]:
        """Atomic increments of every bucket, in one transaction; the totals after them."""

        def add(connection: Connection) -> list[Spent]:
            insert = sqlite_insert if connection.dialect.name == "sqlite" else pg_insert
            out = []
            for bucket in buckets:
                statement = insert(spend).values(
                    agent=bucket.agent,
                    subject=bucket.subject,
                    window=bucket.window,
                    window_start=bucket.start,
                    tokens=tokens,
                    cost_micros=micros,
                )
                upsert = statement.on_conflict_do_update(
                    index_elements=[spend.c.agent, spend.c.subject, spend.c.window, spend.c.window_start],
                    set_={
                        "tokens": spend.c.tokens + statement.excluded.tokens,
                        "cost_micros": spend.c.cost_micros + statement.excluded.cost_micros,
                    },
                ).returning(spend.c.tokens, spend.c.cost_micros)
                row = connection.execute(upsert).one()
                out.append(Spent(int(row.tokens), int(row.cost_micros)))
            return out

        return await self._store.run(add)


def ledger_for(store: ConversationStore) -> Ledger:
    """Spend kept where the conversations are: a database store's tables, else in memory."""
    return SqlLedger(store) if isinstance(store, SqlStore) else MemoryLedger()
