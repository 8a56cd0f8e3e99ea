"""The conversation store on a real PostgreSQL server: the contract, replicas, outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from pallas_io.secrets import SecretFiles
from pallas_runtime.conversations import database as database_module
from pallas_runtime.conversations import sql as sql_module
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.conversations.model import ConversationStore, StoreUnavailable, TurnLost
from pallas_runtime.conversations.sql import SqlStore, engine_url
from tests.support.agents import agent_config
from tests.support.conversations import (
    CONTRACT,
    StoreFactory,
    agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones,
    commit,
    key,
    started,
    turn,
)
from tests.support.postgres import PASSWORD, Postgres
from tests.support.volumes import KubeletVolume

pytestmark = pytest.mark.timeout(300)

TURN_WORK = 0.02
"""Seconds a replica's turn keeps the conversation (its model call): the other's turns queue."""
HANG_UPS_READ = 0.2
"""Seconds for the loop to read the closed connections of a restarted server."""
RECYCLE, PAST_RECYCLE = 0.3, 0.5
"""A pooled connection's lifetime, and a pause that outlasts it."""


def pg_store(server: Postgres, **options: object) -> SqlStore:
    return SqlStore("postgres", engine_url("postgres", server.dsn), secret=PASSWORD, **options)  # type: ignore[arg-type]


def factory_on(server: Postgres) -> StoreFactory:
    @contextlib.asynccontextmanager
    async def factory(
        max_messages: int = 200, turn_wait: float = 30, ttl_seconds: float | None = None
    ) -> AsyncIterator[ConversationStore]:
        store = pg_store(server, max_messages=max_messages, turn_wait=turn_wait, ttl_seconds=ttl_seconds)
        # Every check starts from empty tables (the contract counts conversations).
        await store.start()
        await store.aclose()
        engine = create_async_engine(engine_url("postgres", server.dsn))
        async with engine.begin() as connection:
            await connection.execute(text("DELETE FROM pallas_messages"))
            await connection.execute(text("DELETE FROM pallas_conversations"))
        await engine.dispose()
        store = pg_store(server, max_messages=max_messages, turn_wait=turn_wait, ttl_seconds=ttl_seconds)
        async for running in started(store):
            yield running

    return factory


@pytest.mark.parametrize("check", CONTRACT, ids=lambda f: f.__name__)
async def test_contract(postgres: Postgres, check: Callable[[StoreFactory], Awaitable[None]]) -> None:
    await check(factory_on(postgres))


async def test_agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones(
    postgres: Postgres,
) -> None:
    await agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones(
        lambda **options: pg_store(postgres, max_messages=200, **options), secrets.token_hex(4)
    )


async def test_two_replicas_on_one_database_store_every_turn_in_order(postgres: Postgres) -> None:
    replicas = [pg_store(postgres, max_messages=1000) for _ in range(2)]
    for store in replicas:
        await store.start()
    conversation = key(f"replicas-{secrets.token_hex(4)}")
    order: list[int] = []

    async def one_turn(store: SqlStore, n: int) -> None:
        async with store.turn(conversation) as held:
            # Each turn sees every turn stored before it: the conversation is never interleaved.
            assert len(held.history) == 2 * len(order)
            await asyncio.sleep(TURN_WORK)
            await held.commit(turn(n), "t")
            order.append(n)

    try:
        await asyncio.gather(*(one_turn(replicas[n % 2], n) for n in range(10)))
        history = await replicas[0].history(conversation)
        assert history == [m for n in order for m in turn(n)]
        assert len(order) == 10
    finally:
        for store in replicas:
            await store.aclose()


async def test_a_replica_that_dies_mid_turn_frees_the_conversation_when_its_lease_ends(
    postgres: Postgres,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import timedelta

    monkeypatch.setattr(sql_module, "LEASE", timedelta(seconds=1))
    monkeypatch.setattr(sql_module, "RENEW_EVERY", 3600.0)  # the dead replica renews nothing
    dead, alive = pg_store(postgres, max_messages=100), pg_store(postgres, max_messages=100)
    await dead.start()
    await alive.start()
    conversation = key(f"dead-{secrets.token_hex(4)}")
    try:
        holder = dead.turn(conversation)
        stale_turn = await holder.__aenter__()  # a turn that never finishes: the process died
        started_at = asyncio.get_running_loop().time()
        await commit(alive, conversation, turn(1))
        assert asyncio.get_running_loop().time() - started_at >= 0.9
        # The dead replica's late commit is refused, never stored over the new turn.
        with pytest.raises(TurnLost, match="nothing was stored"):
            await stale_turn.commit(turn(9), "t")
        assert await alive.history(conversation) == turn(1)
    finally:
        await dead.aclose()
        await alive.aclose()


async def test_an_outage_is_a_clear_error_without_the_password_and_the_store_recovers(
    postgres: Postgres,
) -> None:
    store = pg_store(postgres, max_messages=100, turn_wait=5)
    await store.start()
    conversation = key(f"outage-{secrets.token_hex(4)}")
    try:
        await commit(store, conversation, turn(1))
        postgres.stop()
        try:
            problem = await store.check()
            assert problem is not None
            assert problem.startswith("postgres conversation store unavailable:")
            assert PASSWORD not in problem
            with pytest.raises(StoreUnavailable) as failure:
                await commit(store, conversation, turn(2))
            assert PASSWORD not in str(failure.value)
        finally:
            postgres.start()
        assert await store.check() is None
        await commit(store, conversation, turn(3))
        assert await store.history(conversation) == turn(1) + turn(3)
    finally:
        await store.aclose()


@contextlib.asynccontextmanager
async def own_database(server: Postgres) -> AsyncIterator[str]:
    """A database of the test's own on the shared server (its connections are told apart by name)."""
    name = f"budget_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        yield name
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


async def test_every_path_draws_on_one_pool_of_max_connections(postgres: Postgres) -> None:
    """Migrations, turns (lease and commit), reads, the TTL sweep and health checks at once."""
    async with own_database(postgres) as name:
        dsn = postgres.dsn.rsplit("/", 1)[0] + f"/{name}"
        store = SqlStore(
            "postgres", engine_url("postgres", dsn), max_messages=100, ttl_seconds=3600, max_connections=2
        )
        watcher = await asyncpg.connect(postgres.dsn)
        counts: list[int] = []

        async def count() -> None:
            while True:
                sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                counts.append(await watcher.fetchval(sql, name))
                await asyncio.sleep(0.005)

        counting = asyncio.create_task(count())
        await store.start()
        try:

            async def busy(n: int) -> None:
                conversation = key(f"pool-{n}")
                await commit(store, conversation, turn(n))
                assert await store.history(conversation) == turn(n)
                assert await store.check() is None
                await store.sweep()
                assert [t.id for t in await store.threads("harper", "anonymous")]

            await asyncio.gather(*(busy(n) for n in range(30)))
            assert await store.count("harper") == 30
        finally:
            counting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await counting
            await store.aclose()
            await watcher.close()
    assert max(counts) == 2, counts


LONG_STATEMENT = "SELECT pg_sleep(3)"


async def running(server: Postgres, statement: str, within: float = 10.0) -> None:
    """Wait until the server runs `statement` (its connection is taken until it ends)."""
    watcher = await asyncpg.connect(server.dsn)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        sql = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = $1"
        while not await watcher.fetchval(sql, statement):
            if loop.time() > deadline:
                pytest.fail(f"PostgreSQL did not run {statement!r} within {within:g}s")
            await asyncio.sleep(0.01)
    finally:
        await watcher.close()


async def test_work_beyond_the_pool_waits_a_bounded_time_then_fails_clearly(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database_module, "POOL_WAIT", 0.5)
    store = pg_store(postgres, max_messages=100, max_connections=1)
    await store.start()
    conversation = key(f"busy-{secrets.token_hex(4)}")
    loop = asyncio.get_running_loop()
    try:
        holding = asyncio.create_task(store._single(lambda c: c.execute(text(LONG_STATEMENT))))
        await running(postgres, LONG_STATEMENT)  # it has the only connection now
        started = loop.time()
        with pytest.raises(StoreUnavailable) as failure:
            await commit(store, conversation, turn(1))
        assert 0.4 < loop.time() - started < 2.5
        assert str(failure.value) == (
            "postgres conversation store unavailable: all 1 connections of this process "
            "(conversations.postgres.maxConnections) stayed in use for 0.5s"
        )
        assert await store.check() == str(failure.value)  # get_health says so too
        await holding
        await commit(store, conversation, turn(2))  # the connection is free again
        assert await store.history(conversation) == turn(2)
    finally:
        await store.aclose()


async def test_connections_closed_by_a_server_restart_cost_no_turn(postgres: Postgres) -> None:
    store = pg_store(postgres, max_messages=100, max_connections=3)
    await store.start()
    conversations = [key(f"restart-{n}-{secrets.token_hex(4)}") for n in range(3)]
    try:
        await asyncio.gather(*(commit(store, c, turn(1)) for c in conversations))
        postgres.stop()
        postgres.start()
        # Not an ordering: a connection still thought alive is replaced on use as well. This lets
        # the loop read the hang-ups first, the way a pod's pool meets a restart it slept through.
        await asyncio.sleep(HANG_UPS_READ)
        await asyncio.gather(*(commit(store, c, turn(2)) for c in conversations))
        for conversation in conversations:
            assert await store.history(conversation) == turn(1) + turn(2)
    finally:
        await store.aclose()


async def test_connections_are_replaced_after_their_lifetime_without_a_failed_turn(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn takes an idle connection without a greenlet; one due for replacement reconnects."""
    monkeypatch.setattr(database_module, "RECYCLE", RECYCLE)
    store = pg_store(postgres, max_messages=100, max_connections=2)
    await store.start()
    conversation = key(f"recycle-{secrets.token_hex(4)}")
    try:
        for n in range(3):
            await commit(store, conversation, turn(n))
            await asyncio.sleep(PAST_RECYCLE)  # every pooled connection is now past its lifetime
        assert await store.history(conversation) == turn(0) + turn(1) + turn(2)
    finally:
        await store.aclose()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_rotated_dsn_password_is_used_by_the_connections_made_after_it(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a pod the DSN is a file of the Secret volume, read again for each new connection."""
    monkeypatch.setattr(database_module, "RECYCLE", RECYCLE)
    user = f"rot_{secrets.token_hex(3)}"
    postgres.create_role(user, "first-password-1")
    admin = await asyncpg.connect(postgres.dsn)
    try:  # tables an earlier test made as the superuser
        await admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {user}")
    finally:
        await admin.close()
    volume = {"DSN": postgres.dsn_of(user, "first-password-1")}
    store = SqlStore(
        "postgres",
        engine_url("postgres", volume["DSN"]),
        max_messages=100,
        max_connections=1,
        secret="first-password-1",
        dsn=lambda: volume.get("DSN"),
    )
    await store.start()
    conversation = key(f"rotation-{secrets.token_hex(4)}")
    try:
        await commit(store, conversation, turn(1))
        admin = await asyncpg.connect(postgres.dsn)
        try:
            await admin.execute(f"ALTER ROLE {user} PASSWORD 'second-password-2'")
        finally:
            await admin.close()
        volume["DSN"] = postgres.dsn_of(user, "second-password-2")  # the kubelet rewrote the file
        await asyncio.sleep(PAST_RECYCLE)  # the pooled connection is replaced at its next use
        await commit(store, conversation, turn(2))
        assert await store.history(conversation) == turn(1) + turn(2)
        # Both passwords are kept out of what the store reports.
        failure = store.describe(RuntimeError("first-password-1 second-password-2"))
        assert "password-" not in failure
    finally:
        await store.aclose()


async def test_a_dsn_whose_secret_is_not_there_yet_is_unavailable_until_its_file_appears(
    postgres: Postgres, tmp_path: Path
) -> None:
    """The agent's store (`build_store`) from a Secret volume without the DSN's file: no crash.

    It says what is missing, names no value, and connects once the kubelet writes the file.
    """
    config = agent_config(
        "http://127.0.0.1:9/v1",
        conversations={"type": "postgres", "dsnEnv": "PALLAS_DSN", "dsnSource": "Secret db key dsn"},
    )
    volume = KubeletVolume(tmp_path / "secrets", {})
    store = build_store(config, SecretFiles(volume.folder))
    await store.start()
    conversation = key(f"late-dsn-{secrets.token_hex(4)}")
    try:
        problem = await store.check()
        assert problem is not None
        assert "no postgres DSN: Secret db key dsn is not set" in problem
        with pytest.raises(StoreUnavailable, match="no postgres DSN"):
            await commit(store, conversation, turn(1))
        volume.write({"PALLAS_DSN": postgres.dsn})  # the Secret was created; the kubelet wrote it
        assert await store.check() is None
        await commit(store, conversation, turn(1))
        assert await store.history(conversation) == turn(1)
    finally:
        await store.aclose()
