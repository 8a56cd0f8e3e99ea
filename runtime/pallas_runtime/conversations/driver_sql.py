"""A turn's two statements, run on the database driver itself (sqlite3, asyncpg).

Taking the lease and storing a turn are the two trips every `send_message` makes. Through
SQLAlchemy's execution layer each cost several times the statement: 280 µs against 75 µs for
SQLite's lease, and about 0.2 ms more per PostgreSQL round trip (the `Connection` and its
greenlet, and the DBAPI emulation over asyncpg), all of it on the CPU the agent serves HTTP
with. PostgreSQL's connections still come from SQLAlchemy's pool, the process's only one: an
idle one is checked out and back in without a greenlet, ~4 µs (asyncpg's own pool took ~15). The SQL is
still SQLAlchemy's: compiled once from the store's statements, so the schema stays defined in
one place; only the execution goes straight to the driver.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import insert
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg as postgres_asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from pallas_runtime.conversations.database import DriverConnection, PostgresDatabase, SqliteDatabase
from pallas_runtime.conversations.tables import conversations as conv
from pallas_runtime.conversations.tables import messages as msg

_SQLITE = sqlite.dialect(paramstyle="named")
_POSTGRES = postgres_asyncpg.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it untyped


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A statement compiled for one driver, with the constants it binds itself."""

    sql: str
    constants: dict[str, Any]
    order: tuple[str, ...]
    """The parameters' names in `$n` order (asyncpg); empty for named parameters (sqlite3)."""

    @classmethod
    def compile(cls, statement: ClauseElement, dialect: Dialect) -> DriverStatement:
        """Compile `statement`; its literal values (`title=""`, `holder=None`) become constants."""
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        return cls(str(compiled), dict(compiled.params), tuple(compiled.positiontup or ()))

    def named(self, params: dict[str, Any]) -> dict[str, Any]:
        """Named parameters of one execution: the constants, then `params`."""
        return {**self.constants, **params}

    def positional(self, params: dict[str, Any]) -> list[Any]:
        """Positional parameters of one execution, in `$n` order."""
        return [params[name] if name in params else self.constants[name] for name in self.order]


def _sqlite_time_processor() -> Callable[[datetime], str]:
    processor = conv.c.held_until.type.dialect_impl(_SQLITE).bind_processor(_SQLITE)
    assert processor is not None, "SQLite stores datetimes as text"
    return processor


sqlite_time = _sqlite_time_processor()
"""A datetime as SQLAlchemy stores it in SQLite (text that sorts in time order)."""


Added = Sequence[tuple[int, str, str]]
"""A turn's new messages as they are stored: (seq, role, payload JSON)."""


class TurnWriter(Protocol):
    """The lease and the commit of a turn against one database."""

    async def take(self, params: dict[str, Any]) -> str | None:
        """Take the conversation's lease (creating it when new): its version, or None when held."""
        ...

    async def store(self, stored: dict[str, Any], added: Added, trim_before: int | None) -> bool:
        """Record the turn, insert `added`, trim below `trim_before` and release the lease.

        One transaction; False, with nothing written, when the lease was lost.
        """
        ...


class SqliteTurns:
    """A turn's lease and commit over the store thread's own sqlite3 connection (autocommit mode)."""

    def __init__(
        self, database: SqliteDatabase, take: ClauseElement, store: ClauseElement, trim: ClauseElement
    ) -> None:
        """Compile the store's statements (see `sql._Statements`)."""
        self._database = database
        self._take = DriverStatement.compile(take, _SQLITE)
        self._store = DriverStatement.compile(store, _SQLITE)
        self._trim = DriverStatement.compile(trim, _SQLITE)
        self._insert = DriverStatement.compile(insert(msg), _SQLITE)

    async def take(self, params: dict[str, Any]) -> str | None:
        """One statement, atomic on its own: no transaction around it."""
        bound = self._take.named(_sqlite_times(params))

        def take(connection: sqlite3.Connection) -> str | None:
            row = connection.execute(self._take.sql, bound).fetchone()
            return None if row is None else str(row[0])

        return await self._database.driver(take, transaction=False)

    async def store(self, stored: dict[str, Any], added: Added, trim_before: int | None) -> bool:
        """Three statements in one BEGIN IMMEDIATE transaction."""
        bound = self._store.named(_sqlite_times(stored))
        owner = {name: stored[param] for name, param in _MESSAGE_KEY.items()}
        rows = [{**owner, "seq": seq, "role": role, "payload": payload} for seq, role, payload in added]
        trim = None if trim_before is None else self._trim.named({**stored, "p_before": trim_before})

        def store(connection: sqlite3.Connection) -> bool:
            if connection.execute(self._store.sql, bound).fetchone() is None:
                return False
            if rows:
                connection.executemany(self._insert.sql, rows)
            if trim is not None:
                connection.execute(self._trim.sql, trim)
            return True

        return await self._database.driver(store, transaction=True)


_MESSAGE_KEY = {"agent": "p_agent", "owner": "p_owner", "conversation_id": "p_id"}


class PostgresTurns:
    """A turn's lease and commit, each one statement (one round trip) on a pooled asyncpg connection."""

    def __init__(self, database: PostgresDatabase, take: ClauseElement, store_at_once: ClauseElement) -> None:
        """Compile the store's statements (see `sql._Statements`)."""
        self._database = database
        self._take = DriverStatement.compile(take, _POSTGRES)
        self._store = DriverStatement.compile(store_at_once, _POSTGRES)

    async def take(self, params: dict[str, Any]) -> str | None:
        """Retried once on a fresh connection when the first was dead: taking twice is harmless."""
        args = self._take.positional(params)

        async def take(connection: DriverConnection) -> str | None:
            row = await connection.fetchrow(self._take.sql, *args)
            return None if row is None else str(row[0])

        return await self._database.driver(take, retry=True)

    async def store(self, stored: dict[str, Any], added: Added, trim_before: int | None) -> bool:
        """Never retried: a connection lost during the statement may have stored it."""
        seqs, roles, payloads = (
            (list(column) for column in zip(*added, strict=True)) if added else ([], [], [])
        )
        columns = {"p_seqs": seqs, "p_roles": roles, "p_payloads": payloads, "p_before": trim_before or 0}
        args = self._store.positional({**stored, **columns})

        async def store(connection: DriverConnection) -> bool:
            return bool(await connection.fetchval(self._store.sql, *args))

        return await self._database.driver(store, retry=False)


def _sqlite_times(params: dict[str, Any]) -> dict[str, Any]:
    return {
        name: sqlite_time(value) if isinstance(value, datetime) else value for name, value in params.items()
    }
