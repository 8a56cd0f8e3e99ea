"""Spend in the conversation store's database: SQLite or PostgreSQL (see `spending.ledger`).

A module of its own so that an agent on the memory store never imports sqlalchemy and the
database drivers (about 0.7 s of its start).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, and_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from pallas_runtime.conversations.sql import SqlStore
from pallas_runtime.conversations.tables import spend
from pallas_runtime.spending.ledger import Bucket, Spent


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
