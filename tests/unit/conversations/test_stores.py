"""The conversation store contract (tests/support/conversations.py) on the memory and SQLite stores."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pallas_runtime.conversations import sql as sql_module
from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.conversations.model import ConversationStore
from pallas_runtime.conversations.sql import SqlStore, engine_url
from pallas_runtime.messages import AssistantMessage, Message, TextPart, UserMessage
from tests.support.conversations import (
    CONTRACT,
    WAIT,
    StoreFactory,
    agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones,
    commit,
    key,
    started,
    turn,
    until,
)


def memory_factory(_: Path) -> StoreFactory:
    @contextlib.asynccontextmanager
    async def factory(
        max_messages: int = 200, turn_wait: float = 30, ttl_seconds: float | None = None
    ) -> AsyncIterator[ConversationStore]:
        store = MemoryStore(
            max_conversations=100, max_messages=max_messages, turn_wait=turn_wait, ttl_seconds=ttl_seconds
        )
        async for running in started(store):
            yield running

    return factory


def sqlite_factory(tmp: Path) -> StoreFactory:
    @contextlib.asynccontextmanager
    async def factory(
        max_messages: int = 200, turn_wait: float = 30, ttl_seconds: float | None = None
    ) -> AsyncIterator[ConversationStore]:
        url = engine_url("sqlite", str(tmp / "conversations.db"))
        store = SqlStore(
            "sqlite", url, max_messages=max_messages, turn_wait=turn_wait, ttl_seconds=ttl_seconds
        )
        async for running in started(store):
            yield running

    return factory


FACTORIES = {"memory": memory_factory, "sqlite": sqlite_factory}


@pytest.mark.parametrize(
    "kind",
    [pytest.param(kind, marks=pytest.mark.looptime) for kind in FACTORIES],
)
@pytest.mark.parametrize("check", CONTRACT, ids=lambda f: f.__name__)
async def test_contract(kind: str, check: Callable[[StoreFactory], Awaitable[None]], tmp_path: Path) -> None:
    await check(FACTORIES[kind](tmp_path))


async def test_the_memory_store_never_evicts_a_conversation_with_a_turn_in_progress() -> None:
    store = MemoryStore(max_conversations=2, max_messages=10)
    async with store.turn(key("busy")) as held:
        await commit(store, key("b"), turn(1))
        await commit(store, key("c"), turn(1))
        await commit(store, key("d"), turn(1))  # over the limit: b goes, not the held one
        await held.commit(turn(9), "t")
    assert await store.history(key("busy")) == turn(9)
    assert await store.history(key("b")) is None
    assert await store.count("harper") == 2


@pytest.mark.looptime
async def test_two_sqlite_stores_on_one_file_take_turns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes on one database (pallas run restarted beside itself, say): the second
    finds the conversation held by the first's turn and waits until that turn is stored."""
    caplog.set_level(logging.DEBUG, logger=sql_module.__name__)
    url = engine_url("sqlite", str(tmp_path / "shared.db"))
    one, two = (SqlStore("sqlite", url, max_messages=100) for _ in range(2))
    for store in (one, two):
        await store.start()
    try:
        async with one.turn(key()) as held:
            second = asyncio.create_task(commit(two, key(), turn(2)))
            await until(lambda: "held by another process's turn" in caplog.text, "the second store waiting")
            assert not second.done()
            await held.commit(turn(1), "t")
        await asyncio.wait_for(second, WAIT)
        assert await one.history(key()) == turn(1) + turn(2)
    finally:
        for store in (one, two):
            await store.aclose()


async def test_the_ttl_sweep_deletes_conversations_untouched_for_longer_than_the_ttl(tmp_path: Path) -> None:
    path = tmp_path / "ttl.db"
    store = SqlStore("sqlite", engine_url("sqlite", str(path)), max_messages=100, ttl_seconds=3600)
    await store.start()
    try:
        await commit(store, key("old"), turn(1))
        await commit(store, key("new"), turn(1))
        # Last touched two hours ago, as the store writes times (UTC): past the one-hour TTL.
        two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S.%f")
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE pallas_conversations SET updated_at = ? WHERE id = 'old'", (two_hours_ago,))
        assert await store.sweep() == 1
        assert await store.history(key("old")) is None
        assert await store.history(key("new")) == turn(1)
    finally:
        await store.aclose()


def test_dsns_become_asyncpg_urls_and_anything_else_is_refused() -> None:
    assert engine_url("postgres", "postgres://u:p@db:5432/x").startswith("postgresql+asyncpg://u:p@db:5432/x")
    assert engine_url("postgres", "postgresql://u@db/x") == "postgresql+asyncpg://u@db/x"
    with pytest.raises(ValueError, match="postgresql:// URL, not mysql://"):
        engine_url("postgres", "mysql://u@db/x")


async def test_the_memory_store_evicts_past_held_conversations_and_counts_each_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("pallas_runtime.conversations.memory.time.monotonic", lambda: now[0])
    store = MemoryStore(max_conversations=3, max_messages=10)
    for name in "abc":
        await commit(store, key(name), turn(1))
    async with contextlib.AsyncExitStack() as stack:
        for name in "ab":  # the two oldest are in a turn: eviction must pass them by
            await stack.enter_async_context(store.turn(key(name)))
        await commit(store, key("d", agent="other"), turn(1))
        await commit(store, key("e", agent="other"), turn(1))
    assert [k.id for k in store._items] == ["a", "b", "e"]  # c and d went, oldest first
    assert (await store.count("harper"), await store.count("other")) == (2, 1)
    assert await store.delete(key("a"))
    assert not await store.delete(key("a"))
    assert await store.count("harper") == 1

    expiring = MemoryStore(max_conversations=3, max_messages=10, ttl_seconds=60)
    await commit(expiring, key("old"), turn(1))
    now[0] += 61
    await commit(expiring, key("new"), turn(1))
    assert await expiring.count("harper") == 1
    assert await expiring.history(key("old")) is None  # dropped on the way, and not counted twice
    await commit(expiring, key("old"), turn(2))
    assert await expiring.count("harper") == 2
    assert expiring._counts["harper"] == 2


async def test_sqlite_agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones(
    tmp_path: Path,
) -> None:
    url = engine_url("sqlite", str(tmp_path / "shared.db"))
    await agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones(
        lambda **options: SqlStore("sqlite", url, max_messages=200, **options), ""
    )


def long_turn(n: int, size: int) -> list[Message]:
    """One turn whose question and answer weigh about `size` bytes each."""
    return [UserMessage((TextPart(f"q{n} " + "x" * size),)), AssistantMessage(f"a{n} " + "y" * size)]


async def test_the_memory_store_keeps_its_conversations_within_the_byte_budget() -> None:
    store = MemoryStore(max_conversations=1000, max_messages=100, max_bytes=100_000)
    async with store.turn(key("busy")) as held:
        for n in range(30):  # 30 conversations of ~20 kB: room for about five
            await commit(store, key(f"c{n}"), long_turn(n, 10_000))
            assert store.bytes <= 100_000
        await held.commit(long_turn(99, 10_000), "t")  # held all along: never evicted under its turn
    kept = [k.id for k in store._items]
    assert kept[-2:] == ["c29", "busy"]
    assert "c0" not in kept
    assert await store.count("harper") == len(kept)
    assert await store.history(key("c29")) == long_turn(29, 10_000)


async def test_a_conversation_over_the_whole_budget_loses_its_oldest_turns_never_the_newest() -> None:
    store = MemoryStore(max_conversations=10, max_messages=100, max_bytes=50_000)
    for n in range(6):
        await commit(store, key(), long_turn(n, 10_000))
    history = await store.history(key())
    assert history is not None
    assert history == [m for n in (4, 5) for m in long_turn(n, 10_000)]
    assert store.bytes <= 50_000
    await commit(store, key(), long_turn(9, 80_000))  # alone over the budget: kept, alone
    assert await store.history(key()) == long_turn(9, 80_000)


async def test_the_sql_stores_transcript_cache_stays_within_its_budget_and_turns_read_what_it_dropped(
    tmp_path: Path,
) -> None:
    url = engine_url("sqlite", str(tmp_path / "c.db"))
    async for store in started(SqlStore("sqlite", url, max_messages=100, cache_bytes=60_000)):
        assert isinstance(store, SqlStore)
        for n in range(12):
            await commit(store, key(f"c{n % 4}"), long_turn(n, 10_000))
            assert store._cache.bytes <= 60_000
        # c0 was dropped from the cache long ago: its next turn reads it back and appends to it.
        assert key("c0") not in store._cache
        await commit(store, key("c0"), long_turn(99, 10))
        expected = [m for n in (0, 4, 8, 99) for m in long_turn(n, 10_000 if n != 99 else 10)]
        assert await store.history(key("c0")) == expected
        # A transcript over the whole budget is never cached, and its turns still append.
        for n in range(4):
            await commit(store, key("huge"), long_turn(n, 40_000))
        assert key("huge") not in store._cache
        history = await store.history(key("huge"))
        assert history == [m for n in range(4) for m in long_turn(n, 40_000)]
