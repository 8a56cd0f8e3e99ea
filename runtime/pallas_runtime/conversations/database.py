"""Where the SQL store's work runs: a SQLite file in a thread of its own, PostgreSQL over asyncpg.

The store writes each piece of work (a turn's lease, its commit, a read) as one synchronous
function over a SQLAlchemy `Connection`; a `Database` runs it in a transaction and turns the
driver's failures into `StoreUnavailable`.

- SQLite runs in this process: the whole function runs in one hop to a worker thread, on a
  synchronous engine. Through aiosqlite every statement cost three or four hops between the event
  loop and aiosqlite's thread (≈ 40 per turn, most of a turn's 4 ms).
- PostgreSQL is a network round trip per statement whatever the driver: the function runs in
  SQLAlchemy's greenlet over asyncpg. Single reads and the lease run in autocommit (no BEGIN and
  COMMIT round trips), and no connection is pinged before use: a connection found dead (the server
  restarted) invalidates the pool and the work is retried once on a fresh one, unless it may have
  committed already.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, create_engine, event
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from pallas_runtime.conversations.model import StoreUnavailable

T = TypeVar("T")
Work = Callable[[Connection], T]
SQLITE_THREADS = 4
"""Threads for SQLite work: a turn waiting on another process's write lock blocks one of them,
never the event loop nor the default executor (DNS lookups of the LLM client)."""


class Database(Protocol):
    """Runs the store's work against one database."""

    async def transaction(self, work: Work[T]) -> T:
        """Run `work` in one transaction, committed when it returns."""
        ...

    async def single(self, work: Work[T], *, retry: bool = True) -> T:
        """Run `work` (one statement, or reads) without a transaction of its own.

        `retry=False` for a write that must not run twice: a connection lost during it may have
        committed it.
        """
        ...

    async def dispose(self) -> None:
        """Close every connection."""
        ...


class SqliteDatabase:
    """A SQLite file; each piece of work runs whole in one of the store's threads."""

    def __init__(self, url: str, describe: Callable[[BaseException], str]) -> None:
        self._describe = describe
        self._engine = create_engine(
            url,
            # The engine's connections move between the store's threads, one thread at a time.
            connect_args={"timeout": 30, "check_same_thread": False},
            pool_size=SQLITE_THREADS,
            max_overflow=0,
        )
        event.listen(self._engine, "connect", _sqlite_pragmas)
        self._threads = ThreadPoolExecutor(SQLITE_THREADS, thread_name_prefix="conversations")

    async def transaction(self, work: Work[T]) -> T:
        """Run `work` in one transaction, committed when it returns."""
        return await self._in_thread(work)

    async def single(self, work: Work[T], *, retry: bool = True) -> T:
        """Run `work` in a transaction too: in-process, BEGIN and COMMIT cost nothing."""
        return await self._in_thread(work)

    async def _in_thread(self, work: Work[T]) -> T:
        def run() -> T:
            with self._engine.begin() as connection:
                return work(connection)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, run)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable(self._describe(exc)) from None

    async def dispose(self) -> None:
        """Close every connection and stop the threads."""
        await asyncio.get_running_loop().run_in_executor(self._threads, self._engine.dispose)
        self._threads.shutdown(wait=False)


class PostgresDatabase:
    """A PostgreSQL server over asyncpg; work runs in SQLAlchemy's greenlet, a round trip a statement."""

    def __init__(self, url: str, describe: Callable[[BaseException], str]) -> None:
        self._describe = describe
        options: dict[str, Any] = {"pool_size": 5, "max_overflow": 20, "pool_timeout": 30}
        options["pool_recycle"] = 1800
        self._engine = create_async_engine(url, **options)
        self._autocommit = create_async_engine(url, **options, isolation_level="AUTOCOMMIT")

    async def transaction(self, work: Work[T]) -> T:
        """Run `work` in one transaction, committed when it returns."""
        for attempt in (1, 2):
            try:
                async with self._engine.connect() as connection:
                    try:
                        result = await connection.run_sync(work)
                    except DBAPIError as exc:
                        # Nothing was committed: a dead connection is retried on a fresh one.
                        if exc.connection_invalidated and attempt == 1:
                            continue
                        raise
                    await connection.commit()  # a failure here may have committed: never retried
                    return result
            except (SQLAlchemyError, OSError) as exc:
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def single(self, work: Work[T], *, retry: bool = True) -> T:
        """Run `work` in autocommit: a statement is one round trip."""
        for attempt in (1, 2):
            try:
                async with self._autocommit.connect() as connection:
                    return await connection.run_sync(work)
            except DBAPIError as exc:
                if exc.connection_invalidated and attempt == 1 and retry:
                    continue
                raise self._unavailable(exc) from None
            except (SQLAlchemyError, OSError) as exc:
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable(self, exc: BaseException) -> Exception:
        return StoreUnavailable(self._describe(exc))

    async def dispose(self) -> None:
        """Close every connection."""
        with contextlib.suppress(Exception):
            await self._engine.dispose()
        with contextlib.suppress(Exception):
            await self._autocommit.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _: Any) -> None:
    # WAL lets readers run beside the writer (get_health, history, list) in pallas run.
    # synchronous=NORMAL, SQLite's advice for WAL: a commit no longer waits for an fsync (the
    # WAL is synced at checkpoints), so a turn stays durable across a crash of the process and
    # only the last turns can be lost to a power cut or a crash of the machine itself.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
