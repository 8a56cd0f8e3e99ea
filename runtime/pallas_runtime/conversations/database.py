"""Where the SQL store's work runs: a SQLite file in a thread of its own, PostgreSQL over asyncpg.

The store writes each piece of work (a read, a release, a sweep) as one synchronous function
over a SQLAlchemy `Connection`; a `Database` runs it in a transaction and turns the driver's
failures into `StoreUnavailable`. A turn's lease and commit, the two trips of every message, run
on the driver itself (`driver`, see `driver_sql`).

- SQLite runs in this process: the whole function runs in one hop to a worker thread, on a
  synchronous engine; the turn's statements run on that thread's own sqlite3 connection. Through
  aiosqlite every statement cost three or four hops between the event loop and aiosqlite's thread
  (≈ 40 per turn, most of a turn's 4 ms).
- PostgreSQL is a network round trip per statement whatever the driver: the function runs in
  SQLAlchemy's greenlet over asyncpg, the turn's statements straight on the asyncpg connection
  of a checkout from the same pool. That pool is the process's only one, of
  `conversations.postgres.maxConnections`: two engines and an asyncpg pool of their own could
  open 60 connections a process, and three replicas of a few agents exhausted a server's 100.
  Single reads, the lease and the commit run in autocommit (no BEGIN and COMMIT round trips),
  and no connection is pinged before use: a connection found dead (the server restarted) is
  dropped and the work is retried once on a fresh one, unless it may have committed already.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeAlias, TypeVar, cast

import asyncpg
from asyncpg import Record
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, MissingGreenlet, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import PoolProxiedConnection, QueuePool
from sqlalchemy.util.concurrency import in_greenlet

from pallas_runtime.conversations.model import StoreUnavailable

T = TypeVar("T")
Work = Callable[[Connection], T]
DriverWork = Callable[[sqlite3.Connection], T]
DriverConnection: TypeAlias = "asyncpg.Connection[Record]"
"""The asyncpg connection under a pooled one (generic in its stubs only)."""
AsyncpgWork = Callable[[DriverConnection], Awaitable[T]]
POOL_WAIT = 10.0
"""Seconds a piece of work waits for one of the process's PostgreSQL connections, then fails:
statements hold a connection for a round trip or a few, never across an LLM call."""
RECYCLE = 1800
"""Seconds after which a PostgreSQL connection is replaced at its next checkout (proxies and
firewalls drop long-lived idle connections without a word)."""
UNKNOWN_URL = "postgresql+asyncpg://"
"""The engine's URL while the DSN is not known: never connected to (`_connect` refuses first)."""
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
        self._path = str(make_url(url).database)
        self._local = threading.local()
        self._driver_connections: list[sqlite3.Connection] = []

    async def transaction(self, work: Work[T]) -> T:
        """Run `work` in one transaction, committed when it returns."""

        def run() -> T:
            with self._engine.begin() as connection:
                return work(connection)

        return await self._in_thread(run)

    async def single(self, work: Work[T], *, retry: bool = True) -> T:
        """Run `work` in a transaction too: in-process, BEGIN and COMMIT cost nothing."""
        return await self.transaction(work)

    async def driver(self, work: DriverWork[T], *, transaction: bool) -> T:
        """Run `work` on the thread's own sqlite3 connection, which is in autocommit mode.

        `transaction=True` wraps it in BEGIN IMMEDIATE … COMMIT: the write lock is taken first,
        so a concurrent writer in another process makes it wait (busy timeout), never fail.
        """

        def run() -> T:
            connection = self._driver_connection()
            if not transaction:
                return work(connection)
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
                connection.commit()
            except BaseException:
                # A failed commit too: the next turn on this connection must find no transaction.
                with contextlib.suppress(sqlite3.Error):
                    connection.rollback()
                raise
            return result

        return await self._in_thread(run)

    def _driver_connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self._path, timeout=30, isolation_level=None, check_same_thread=False
            )
            _sqlite_pragmas(connection, None)
            self._local.connection = connection
            self._driver_connections.append(connection)
        return connection

    async def _in_thread(self, run: Callable[[], T]) -> T:
        """One hop to a store thread and back; the driver's failures become `StoreUnavailable`."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, run)
        except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(self._describe(exc)) from None

    async def dispose(self) -> None:
        """Close every connection and stop the threads."""

        def close() -> None:
            self._engine.dispose()
            for connection in self._driver_connections:
                connection.close()

        await asyncio.get_running_loop().run_in_executor(self._threads, close)
        self._threads.shutdown(wait=False)


class PostgresDatabase:
    """A PostgreSQL server over asyncpg, through one pool of at most `max_connections`.

    The pool is SQLAlchemy's: its transactions and reads check connections out of it, and so do
    the turn's statements, which run on the asyncpg connection underneath (`driver`), taking an
    idle one without SQLAlchemy's greenlet. Autocommit is an option of the checkout, not a
    second engine. A caller that finds every connection in use waits at most `POOL_WAIT`
    seconds, then fails with `StoreUnavailable`.
    """

    def __init__(
        self,
        url: str | None,
        describe: Callable[[BaseException], str],
        *,
        max_connections: int,
        dsn: Callable[[], str | None] | None = None,
        missing: str = "no postgres DSN",
    ) -> None:
        """Configure the pool; nothing connects yet.

        `dsn` gives the DSN as it is now (a pod's Secret file, read at each new connection), so
        a rotated password reaches the connections made after the rotation; `url`'s is used when
        it gives none. Connections already open keep theirs (PostgreSQL does not end a session
        when its password changes), at most `RECYCLE` seconds. With neither (the Secret is not
        there yet) a connection fails as unavailable, saying `missing`.
        """
        self._describe = describe
        self._max_connections = max_connections
        self._dsn = (
            make_url(url).set(drivername="postgresql").render_as_string(hide_password=False) if url else None
        )
        self._dsn_now = dsn
        self._missing = missing
        self._engine = create_async_engine(
            url or UNKNOWN_URL,
            async_creator=self._connect,
            pool_size=max_connections,
            max_overflow=0,
            pool_timeout=POOL_WAIT,
            pool_recycle=RECYCLE,
        )
        self._autocommit = self._engine.execution_options(isolation_level="AUTOCOMMIT")

    async def driver(self, work: AsyncpgWork[T], *, retry: bool) -> T:
        """Run `work` (one statement, autocommit) on the asyncpg connection of a pooled checkout.

        A connection found dead (the server restarted) is dropped; `retry=True` runs the work
        again on a fresh one, for statements that may safely run twice.
        """
        for attempt in (1, 2):
            pooled, connection = await self._open_checkout()
            try:
                result = await work(connection)
            except BaseException as exc:
                # Failed or cancelled mid-statement, the connection may still be busy or broken:
                # it is closed (synchronously), never handed to the next caller.
                pooled.invalidate()
                dead = isinstance(exc, asyncpg.exceptions.ConnectionDoesNotExistError | ConnectionResetError)
                if dead and attempt == 1 and retry:
                    continue
                if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError | OSError | TimeoutError):
                    raise self._unavailable(exc) from None
                raise
            # Checking in is no I/O (no SQLAlchemy transaction ran on it to roll back), so it
            # needs no hop to a greenlet either.
            pooled.close()
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open_checkout(self) -> tuple[PoolProxiedConnection, DriverConnection]:
        """A pooled connection and its asyncpg connection, which the server has not closed.

        Connections the server closed while they sat in the pool (it restarted) ran nothing:
        each is dropped for the next, at worst until the pool connects afresh.
        """
        for _ in range(self._max_connections):
            pooled = await self._checkout()
            connection = cast("DriverConnection", pooled.driver_connection)
            if not connection.is_closed():
                return pooled, connection
            pooled.invalidate()
        pooled = await self._checkout()
        return pooled, cast("DriverConnection", pooled.driver_connection)

    def _connect(self) -> Coroutine[Any, Any, asyncpg.Connection]:
        """A new connection (the pool's creator); refused outside SQLAlchemy's greenlet.

        So a checkout attempted without the greenlet (`_checkout`) fails before it starts any
        I/O, and its caller takes the greenlet's way.
        """
        if not in_greenlet():
            raise MissingGreenlet("a new connection is made in SQLAlchemy's greenlet only")
        dsn = (self._dsn_now() if self._dsn_now is not None else None) or self._dsn
        if dsn is None:
            raise ConnectionRefusedError(self._missing)  # an OSError: unavailable, as a down server
        return asyncpg.connect(dsn)

    async def _checkout(self) -> PoolProxiedConnection:
        pool = self._engine.sync_engine.pool
        if isinstance(pool, QueuePool) and pool.checkedin():
            # An idle connection is taken without I/O, so without the hop to a greenlet that
            # `raw_connection` makes (half the checkout's cost). One that must be replaced
            # first (closed, invalidated, older than RECYCLE) is dropped, its slot back in the
            # pool, and `_connect` refuses to reconnect here.
            with contextlib.suppress(MissingGreenlet):
                return pool.connect()
        try:
            return await self._engine.raw_connection()
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            raise self._unavailable(exc) from None

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
            except (SQLAlchemyError, OSError, TimeoutError) as exc:
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
            except (SQLAlchemyError, OSError, TimeoutError) as exc:
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable(self, exc: BaseException) -> Exception:
        if isinstance(exc, PoolTimeout):
            exc = TimeoutError(
                f"all {self._max_connections} connections of this process "
                f"(conversations.postgres.maxConnections) stayed in use for {POOL_WAIT:g}s"
            )
        return StoreUnavailable(self._describe(exc))

    async def dispose(self) -> None:
        """Close every connection."""
        with contextlib.suppress(Exception):
            await self._engine.dispose()


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
