"""SQLite and PostgreSQL stores through SQLAlchemy 2 (SQLite in a worker thread, asyncpg).

A turn holds its conversation with a lease in the conversation's row (`holder`, `held_until`),
renewed while the turn runs: turns of one conversation never interleave, whichever replica or
process runs them, and a replica that dies mid-turn frees its conversations when the lease runs
out. Within one process a lock per conversation keeps local turns from polling each other. The
commit inserts the turn's messages, trims the oldest ones at a turn boundary and releases the
lease in one transaction. The schema is created and upgraded by Alembic at start-up. Each piece
of work is one synchronous function over a connection, run by `database.Database`; the lease and
the commit run on the driver itself (`driver_sql.TurnWriter`). A PostgreSQL store opens at most
`max_connections` connections, one pool for all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, and_, bindparam, case, delete, func, insert, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.sql.elements import BindParameter

from pallas_api.fields import DEFAULT_HISTORY_BYTES, DEFAULT_MAX_CONNECTIONS
from pallas_io.backoff import backoff
from pallas_runtime.conversations import codec, tenancy
from pallas_runtime.conversations.database import Database, PostgresDatabase, SqliteDatabase
from pallas_runtime.conversations.driver_sql import PostgresTurns, SqliteTurns, TurnWriter
from pallas_runtime.conversations.history import first_kept, role_of
from pallas_runtime.conversations.locks import KeyedLocks
from pallas_runtime.conversations.model import (
    ConversationBusy,
    ConversationKey,
    StoreUnavailable,
    ThreadInfo,
    Turn,
    TurnLost,
)
from pallas_runtime.conversations.tables import conversations as conv
from pallas_runtime.conversations.tables import messages as msg
from pallas_runtime.conversations.weight import SizedLru, footprint
from pallas_runtime.messages import Message

_T = TypeVar("_T")
log = logging.getLogger(__name__)
LEASE = timedelta(seconds=30)
CACHED_CONVERSATIONS = 1000
"""Transcripts kept in process (also bounded in bytes, `history.maxBytes`): a turn reads its
history from the database only when another process (a replica) wrote to the conversation since
this one did."""
RENEW_EVERY = 10.0
FIRST_RETRY = 0.01
"""Seconds before asking again for a conversation another process holds (doubling up to `LAST_RETRY`)."""
LAST_RETRY = 0.5
HEARTBEAT_EVERY = 300.0
"""Seconds between two records that the agent runs (`abandonedAfterSeconds` is at least 3600)."""
CHECK_TIMEOUT = 3.0


def engine_url(kind: str, target: str) -> str:
    """The SQLAlchemy URL of a SQLite file path or a PostgreSQL DSN (`postgres[ql]://…`)."""
    if kind == "sqlite":
        return f"sqlite:///{target}"
    url = make_url(target)
    if url.drivername in ("postgres", "postgresql", "postgresql+asyncpg"):
        return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise ValueError(f"the conversations DSN must be a postgresql:// URL, not {url.drivername}://")


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time here is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _pk(key: ConversationKey) -> Any:
    return and_(conv.c.agent == key.agent, conv.c.owner == key.owner, conv.c.id == key.id)


def _messages_of(key: ConversationKey) -> Any:
    return and_(msg.c.agent == key.agent, msg.c.owner == key.owner, msg.c.conversation_id == key.id)


_kept = or_(conv.c.message_count > 0, conv.c.meta.is_not(None))
"""A conversation as callers see it: one with a message, or one `create` made (an empty row
without settings is a first turn in progress, or one that stored nothing)."""


def _key_params(key: ConversationKey) -> dict[str, str]:
    return {"p_agent": key.agent, "p_owner": key.owner, "p_id": key.id}


class _Statements:
    """The statements of a turn, built once with bound parameters.

    Each turn only binds values: building and cache-keying a statement per call was most of a
    turn's CPU.
    """

    def __init__(self, kind: str) -> None:
        key = and_(
            conv.c.agent == bindparam("p_agent"),
            conv.c.owner == bindparam("p_owner"),
            conv.c.id == bindparam("p_id"),
        )
        messages_of = and_(
            msg.c.agent == bindparam("p_agent"),
            msg.c.owner == bindparam("p_owner"),
            msg.c.conversation_id == bindparam("p_id"),
        )
        insert_ = sqlite_insert if kind == "sqlite" else pg_insert
        now: BindParameter[datetime] = bindparam("p_now")
        until: BindParameter[datetime] = bindparam("p_until")
        holder: BindParameter[str] = bindparam("p_holder")
        self.take = (
            insert_(conv)
            .values(
                agent=bindparam("p_agent"),
                owner=bindparam("p_owner"),
                id=bindparam("p_id"),
                title="",
                created_at=now,
                updated_at=now,
                message_count=0,
                next_seq=0,
                version="",
                holder=holder,
                held_until=until,
            )
            .on_conflict_do_update(
                index_elements=[conv.c.agent, conv.c.owner, conv.c.id],
                set_={"holder": holder, "held_until": until},
                # A retried statement finds its own hold: taking it again is not waiting for it.
                where=or_(conv.c.holder.is_(None), conv.c.held_until < now, conv.c.holder == holder),
            )
            .returning(conv.c.version)
        )
        """Create the conversation held, or take it when free: its version, or no row when held."""
        self.transcript = select(msg.c.seq, msg.c.payload).where(messages_of).order_by(msg.c.seq)
        self.store = (
            update(conv)
            .where(key, conv.c.holder == holder)
            .values(
                title=case((conv.c.title == "", bindparam("p_title")), else_=conv.c.title),
                updated_at=now,
                message_count=bindparam("p_count"),
                next_seq=bindparam("p_next_seq"),
                version=bindparam("p_version"),
                holder=None,
                held_until=None,
            )
            .returning(conv.c.id)
        )
        """Record a stored turn and release the hold; no row when the hold was lost."""
        self.trim = delete(msg).where(messages_of, msg.c.seq < bindparam("p_before"))
        self.store_at_once = text(_STORE_AT_ONCE) if kind == "postgres" else None
        """PostgreSQL: `store`, the insert and the trim as one statement, so one round trip."""

    def writer(self, database: Database) -> TurnWriter:
        """The lease and the commit, run on the database's driver itself."""
        if isinstance(database, SqliteDatabase):
            return SqliteTurns(database, self.take, self.store, self.trim)
        assert isinstance(database, PostgresDatabase)
        assert self.store_at_once is not None
        return PostgresTurns(database, self.take, self.store_at_once)


# A statement is atomic, so the three changes need no transaction: BEGIN and COMMIT would be two
# more round trips. The CTEs share one snapshot, so the trim cannot see the rows the insert adds:
# the commit never inserts rows that the trim would remove.
_STORE_AT_ONCE = """
WITH kept AS (
    UPDATE pallas_conversations
    SET title = CASE WHEN title = '' THEN :p_title ELSE title END, updated_at = :p_now,
        message_count = :p_count, next_seq = :p_next_seq, version = :p_version,
        holder = NULL, held_until = NULL
    WHERE agent = :p_agent AND owner = :p_owner AND id = :p_id AND holder = :p_holder
    RETURNING id
), added AS (
    INSERT INTO pallas_messages (agent, owner, conversation_id, seq, role, payload)
    SELECT :p_agent, :p_owner, :p_id, m.seq, m.role, m.payload
    FROM unnest(CAST(:p_seqs AS integer[]), CAST(:p_roles AS text[]), CAST(:p_payloads AS text[]))
        AS m(seq, role, payload)
    WHERE EXISTS (SELECT 1 FROM kept)
), trimmed AS (
    DELETE FROM pallas_messages
    WHERE agent = :p_agent AND owner = :p_owner AND conversation_id = :p_id AND seq < :p_before
        AND EXISTS (SELECT 1 FROM kept)
)
SELECT count(*) FROM kept
"""


def _migrate(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(files("pallas_runtime.conversations") / "migrations"))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


@dataclass(frozen=True, slots=True)
class _Transcript:
    """A conversation as this process last read or wrote it, at `version`."""

    version: str
    messages: list[Message]
    seqs: list[int]
    sizes: list[int]
    """Each message's `footprint`."""


@dataclass
class _SqlTurn:
    store: SqlStore
    key: ConversationKey
    holder: str
    start: _Transcript
    """The conversation as the turn found it: what its commit appends to."""
    committed: bool = False
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def history(self) -> Sequence[Message]:
        return self.start.messages

    async def commit(self, messages: Sequence[Message], title: str) -> None:
        if self.lost.is_set():
            raise TurnLost(self.store.lost_message(self.key))
        await self.store._commit(self, messages, title)
        self.committed = True


class SqlStore:
    """Conversations in SQLite or PostgreSQL."""

    def __init__(
        self,
        kind: str,
        url: str | None,
        *,
        max_messages: int,
        cache_bytes: int = DEFAULT_HISTORY_BYTES,
        ttl_seconds: float | None = None,
        turn_wait: float = 600.0,
        secret: str | None = None,
        identity: str | None = None,
        legacy_name: str | None = None,
        abandoned_after: float | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        dsn: Callable[[], str | None] | None = None,
        missing_dsn: str | None = None,
    ) -> None:
        """Build the store; nothing connects until `start`.

        Args:
            kind: `sqlite` or `postgres`.
            url: From `engine_url`; None for PostgreSQL whose DSN is not known yet (`dsn` gives it
                later; until then every use is `StoreUnavailable` saying `missing_dsn`).
            max_messages: Messages kept per conversation.
            cache_bytes: The most the transcripts kept in process may weigh (`weight.footprint`).
            ttl_seconds: Delete conversations untouched this long; None keeps them.
            turn_wait: Seconds a turn waits for the previous turn of its conversation.
            secret: The DSN's password, scrubbed from every message this store reports.
            identity: The identity of the agent this process serves (its rows' `agent`): it
                heartbeats, adopts rows keyed by `legacy_name` and deletes its predecessors'
                (`tenancy.claim`); None does no housekeeping of agents.
            legacy_name: The agent's bare name, which keyed its rows before identities.
            abandoned_after: Seconds after which an identity that stopped running loses its
                conversations (`tenancy.purge_abandoned`); None keeps them.
            max_connections: PostgreSQL: the one pool's size, for every piece of work.
            dsn: PostgreSQL: the DSN as it is now, read for each new connection (a rotated
                password is used from then on; its password is scrubbed too).
            missing_dsn: PostgreSQL: what to say while there is no DSN at all.
        """
        self.kind = kind
        self._max_messages = max_messages
        self._ttl = timedelta(seconds=ttl_seconds) if ttl_seconds else None
        self._turn_wait = turn_wait
        self._secrets = {secret} if secret else set()
        self._dsn_source = dsn
        self._locks = KeyedLocks()
        self._cache: SizedLru[ConversationKey, _Transcript] = SizedLru(
            max_items=CACHED_CONVERSATIONS, max_bytes=cache_bytes
        )
        self._statements = _Statements(kind)
        self._holder_prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._migrated = False
        self._migrating: asyncio.Lock | None = None
        self._db: Database
        if kind == "sqlite":
            assert url is not None, "a SQLite store has a path"
            self._db = SqliteDatabase(url, self.describe)
        else:
            self._db = PostgresDatabase(
                url, self.describe, max_connections=max_connections,
                dsn=self._current_dsn if dsn else None, missing=missing_dsn or "no postgres DSN",
            )  # fmt: skip
        self._turns = self._statements.writer(self._db)
        self._sweeper: asyncio.Task[None] | None = None
        self._identity = identity
        self._legacy_name = legacy_name
        self._abandoned_after = timedelta(seconds=abandoned_after) if abandoned_after else None

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Migrate, claim the agent's rows and start the housekeeping.

        An unanswering database is not an error here: the first use migrates and claims.
        """
        self._migrating = asyncio.Lock()
        with contextlib.suppress(StoreUnavailable):
            await self._ready()
        if self._ttl is not None or self._identity is not None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="conversations-housekeeping")

    async def aclose(self) -> None:
        """Stop the sweep and release every connection."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._db.dispose()

    def describe(self, exc: BaseException) -> str:
        """A short reason, without the password."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, SQLAlchemyError) and exc.__cause__ is not None:
            text = " ".join(str(exc.__cause__).split()) or type(exc.__cause__).__name__
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return f"{self.kind} conversation store unavailable: {text[:300]}"

    def _current_dsn(self) -> str | None:
        """The DSN now, for asyncpg (None: there is none usable; the one at start is used)."""
        value = self._dsn_source() if self._dsn_source is not None else None
        if not value:
            return None
        try:
            url = make_url(engine_url("postgres", value))
        except (ArgumentError, ValueError):
            return None
        if url.password:
            self._secrets.add(url.password)
        return url.set(drivername="postgresql").render_as_string(hide_password=False)

    def lost_message(self, key: ConversationKey) -> str:
        """What a caller is told when a turn lost its hold on the conversation."""
        return (
            f"conversation {key.id!r}: the turn lost its hold on the conversation (the store was "
            "unreachable for longer than the lease); nothing was stored, send the message again"
        )

    async def _transaction(self, work: Callable[[Connection], _T]) -> _T:
        """Run `work` in one transaction (`StoreUnavailable` when the database fails)."""
        await self._ready()
        return await self._db.transaction(work)

    async def run(self, work: Callable[[Connection], _T]) -> _T:
        """Run `work` in one transaction on the store's database (the spend of budgets)."""
        return await self._transaction(work)

    async def _single(self, work: Callable[[Connection], _T], *, retry: bool = True) -> _T:
        """Run `work` (one statement, or reads) without a transaction of its own."""
        await self._ready()
        return await self._db.single(work, retry=retry)

    async def _rows(self, statement: Any, params: dict[str, Any] | None = None) -> list[Any]:
        """Run one statement on its own and return its rows."""

        def run(connection: Connection) -> list[Any]:
            result = connection.execute(statement, params)
            return list(result.all()) if result.returns_rows else [result.rowcount]

        return await self._single(run)

    async def _ready(self) -> None:
        if self._migrated:
            return
        assert self._migrating is not None, "start() the store first"
        async with self._migrating:  # one migration at a time; a second one finds nothing to do
            if not self._migrated:
                await self._db.transaction(_migrate)
                # Before any turn: a turn on a legacy conversation must find it adopted.
                await self._claim()
            self._migrated = True

    async def check(self) -> str | None:
        """None when a query answers within a few seconds; otherwise why not."""
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                await self._rows(select(1))
        except StoreUnavailable as exc:
            return str(exc)
        except TimeoutError:
            return f"{self.kind} conversation store unavailable: no answer within {CHECK_TIMEOUT:g}s"
        return None

    # --- turns -----------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(self, key: ConversationKey) -> AsyncIterator[Turn]:
        """Hold the conversation for one turn; see `ConversationStore.turn`."""
        try:
            async with self._locks.hold(key, self._turn_wait):
                holder = f"{self._holder_prefix}-{uuid.uuid4().hex[:8]}"
                version = await self._acquire(key, holder)
                turn = _SqlTurn(self, key, holder, await self._transcript(key, version))
                renewer = asyncio.create_task(self._renew(turn), name="conversation-lease")
                try:
                    yield turn
                finally:
                    renewer.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await renewer
                    if not turn.committed:
                        await asyncio.shield(self._release(turn))
        except TimeoutError:
            raise ConversationBusy(
                f"conversation {key.id!r} is busy: its previous turn did not finish within "
                f"{self._turn_wait:g}s"
            ) from None

    async def _acquire(self, key: ConversationKey, holder: str) -> str:
        """Take the conversation's lease (creating it when new); its version.

        Waits while another turn holds it.
        """
        waits = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._turn_wait
        while True:
            now = _now()
            params = {**_key_params(key), "p_holder": holder, "p_now": now, "p_until": now + LEASE}
            version = await self._take(params)
            if version is not None:
                return version
            if loop.time() >= deadline:
                raise TimeoutError
            if waits == 0:
                log.debug("conversation %r is held by another process's turn; waiting for it", key.id)
            await asyncio.sleep(backoff(waits, first=FIRST_RETRY, cap=LAST_RETRY))
            waits += 1

    async def _take(self, params: dict[str, Any]) -> str | None:
        """One attempt at the lease: the conversation's version, or None while another turn holds it."""
        await self._ready()
        return await self._turns.take(params)

    async def _transcript(self, key: ConversationKey, version: str) -> _Transcript:
        """The conversation at `version`: from this process's cache when no one else wrote since."""
        cached = self._cache.get(key)
        if cached is not None and cached.version == version:
            return cached
        rows = await self._rows(self._statements.transcript, _key_params(key))
        messages = [codec.decode(json.loads(row.payload)) for row in rows]
        seqs, sizes = [row.seq for row in rows], [footprint(m) for m in messages]
        transcript = _Transcript(version, messages, seqs, sizes)
        self._remember(key, transcript)
        return transcript

    def _remember(self, key: ConversationKey, transcript: _Transcript) -> None:
        self._cache.put(key, transcript, sum(transcript.sizes))
        # A transcript a turn holds stays (the turn has it anyway); one that alone is over the
        # cache's byte bound is dropped at once and read again next time.
        self._cache.evict(keep=lambda k: k != key and self._locks.held(k))

    async def _renew(self, turn: _SqlTurn) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY)
            try:
                held = and_(_pk(turn.key), conv.c.holder == turn.holder)
                renewed = await self._rows(update(conv).where(held).values(held_until=_now() + LEASE))
                if renewed != [1]:
                    turn.lost.set()
                    return
            except StoreUnavailable as exc:  # the next renewal may succeed before the lease ends
                log.warning("renewing the hold on conversation %r failed: %s", turn.key.id, exc)

    async def _commit(self, turn: _SqlTurn, messages: Sequence[Message], title: str) -> None:
        """Store the turn, trim and release, in one transaction; refused if the lease was lost."""
        key = turn.key
        before = turn.start
        first_seq = (before.seqs[-1] + 1) if before.seqs else 0
        all_messages = [*before.messages, *messages]
        all_seqs = [*before.seqs, *range(first_seq, first_seq + len(messages))]
        cut = first_kept([role_of(m) for m in all_messages], self._max_messages)
        version = uuid.uuid4().hex
        stored = {
            **_key_params(key),
            "p_holder": turn.holder,
            "p_title": title,
            "p_now": _now(),
            "p_count": len(all_messages) - cut,
            "p_next_seq": first_seq + len(messages),
            "p_version": version,
        }
        # Only what the trim keeps is inserted (a turn longer than the limit loses its own start).
        added = [
            (seq, role_of(m), json.dumps(codec.encode(m)))
            for seq, m in zip(all_seqs[len(before.seqs) :], messages, strict=True)
            if cut == 0 or seq >= all_seqs[cut]
        ]
        await self._ready()
        stored_turn = await self._turns.store(stored, added, all_seqs[cut] if cut else None)
        if not stored_turn:
            self._cache.pop(key)
            raise TurnLost(self.lost_message(key))
        sizes = [*before.sizes, *(footprint(m) for m in messages)]
        self._remember(key, _Transcript(version, all_messages[cut:], all_seqs[cut:], sizes[cut:]))

    async def _release(self, turn: _SqlTurn) -> None:
        """Give the lease back; a conversation this turn created and never filled goes away."""
        held = and_(_pk(turn.key), conv.c.holder == turn.holder)

        def release(connection: Connection) -> None:
            # A created conversation (settings kept) stays, empty, as `create` made it.
            connection.execute(delete(conv).where(held, conv.c.message_count == 0, conv.c.meta.is_(None)))
            connection.execute(update(conv).where(held).values(holder=None, held_until=None))

        try:
            await self._transaction(release)
        except StoreUnavailable as exc:  # the lease runs out by itself
            log.warning("releasing conversation %r failed: %s", turn.key.id, exc)

    # --- reading and housekeeping ----------------------------------------------------------

    async def history(self, key: ConversationKey) -> list[Message] | None:
        """The stored messages, or None when there is no such conversation."""
        rows = await self._rows(select(msg.c.payload).where(_messages_of(key)).order_by(msg.c.seq))
        return [codec.decode(json.loads(row.payload)) for row in rows] if rows else None

    async def threads(self, agent: str, owner: str, only: Collection[str] | None = None) -> list[ThreadInfo]:
        """The caller's conversations (those of `only`, when given), most recently updated first."""
        query = select(conv.c.id, conv.c.title, conv.c.updated_at, conv.c.message_count).where(
            conv.c.agent == agent, conv.c.owner == owner, _kept
        )
        if only is not None:
            query = query.where(conv.c.id.in_(list(only)))
        rows = await self._rows(query.order_by(conv.c.updated_at.desc()).limit(1000))
        return [ThreadInfo(r.id, r.title, _aware(r.updated_at), r.message_count) for r in rows]

    async def create(self, key: ConversationKey, settings: Mapping[str, str], title: str) -> None:
        """Insert the empty conversation with its settings (JSON in `meta`)."""
        now = _now()
        row = {
            "agent": key.agent, "owner": key.owner, "id": key.id, "title": title[:200], "created_at": now,
            "updated_at": now, "message_count": 0, "next_seq": 0, "version": "",
            "meta": json.dumps(dict(settings), sort_keys=True),
        }  # fmt: skip
        await self._single(lambda c: c.execute(insert(conv).values(row)), retry=False)

    async def settings(self, key: ConversationKey) -> dict[str, str] | None:
        """The settings `create` kept, or None."""
        rows = await self._rows(select(conv.c.meta).where(_pk(key)))
        if not rows or rows[0].meta is None:
            return None
        found: dict[str, str] = json.loads(rows[0].meta)
        return found

    async def delete(self, key: ConversationKey) -> bool:
        """Forget one conversation and its messages."""
        self._cache.pop(key)

        def forget(connection: Connection) -> bool:
            connection.execute(delete(msg).where(_messages_of(key)))
            return bool(connection.execute(delete(conv).where(_pk(key), _kept)).rowcount)

        return await self._transaction(forget)

    async def count(self, agent: str) -> int:
        """Conversations kept for `agent`."""
        rows = await self._rows(select(func.count()).select_from(conv).where(conv.c.agent == agent, _kept))
        return int(rows[0][0] or 0)

    async def sweep(self) -> int:
        """Delete conversations untouched for longer than the TTL (never one held by a turn)."""
        if self._ttl is None:
            return 0
        cutoff = _now() - self._ttl
        stale = and_(conv.c.updated_at < cutoff, conv.c.holder.is_(None))

        def sweep(connection: Connection) -> int:
            keys = connection.execute(select(conv.c.agent, conv.c.owner, conv.c.id).where(stale)).all()
            for agent, owner, id_ in keys:
                connection.execute(delete(msg).where(_messages_of(ConversationKey(agent, owner, id_))))
            connection.execute(delete(conv).where(stale))
            return len(keys)

        return await self._transaction(sweep)

    async def _claim(self) -> None:
        """Heartbeat, adopt legacy rows, delete predecessors' (`tenancy.claim`); part of `_ready`."""
        if self._identity is None:
            return
        identity = self._identity
        adopted, removed = await self._db.transaction(
            lambda c: tenancy.claim(c, identity, self._legacy_name, _now())
        )
        if adopted:
            log.info("adopted %d conversations stored under the agent's name before identities", adopted)
        if removed:
            log.info("deleted %d conversations of this agent's deleted predecessors", removed)

    async def housekeeping(self) -> None:
        """One round: TTL sweep, heartbeat, abandoned agents."""
        expired = await self.sweep()
        if expired:
            log.info("deleted %d conversations older than the TTL", expired)
        if self._identity is None:
            return
        identity, now = self._identity, _now()
        await self._transaction(lambda c: tenancy.heartbeat(c, identity, now))
        # Deleted agents whose retention ran out (`purge --after`) go whatever the setting.
        cutoff = now - self._abandoned_after if self._abandoned_after is not None else None
        abandoned = await self._transaction(lambda c: tenancy.purge_abandoned(c, cutoff, now))
        if abandoned:
            log.info("deleted %d conversations of agents deleted or gone for longer than allowed", abandoned)

    async def purge(self, identity: str, after: float = 0) -> int:
        """A deleted agent's conversations: gone now (`after` 0) or marked to go `after` seconds on.

        Returns:
            How many conversations were deleted now.
        """
        expires_at = _now() + timedelta(seconds=after) if after > 0 else None
        return await self._transaction(lambda c: tenancy.purge(c, identity, expires_at))

    def _housekeeping_every(self) -> float:
        periods = [HEARTBEAT_EVERY]
        if self._ttl is not None:
            periods.append(max(self._ttl.total_seconds() / 2, 1.0))
        return min(periods)

    async def _sweep_forever(self) -> None:
        every = self._housekeeping_every()
        while True:
            await asyncio.sleep(every)
            try:
                await self.housekeeping()
            except StoreUnavailable as exc:
                log.warning("the conversation store's housekeeping failed: %s", exc)
