"""The SQLite store's lease on the wall clock: two processes on one database file.

The lease is a wall-clock time written into the file (as on PostgreSQL, whose twin of this test
is in test_postgres_store.py), so this test waits real seconds; the store's contract and the
rest of its behaviour run in the unit tier on the fake loop clock.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from pallas_runtime.conversations import sql as sql_module
from pallas_runtime.conversations.model import TurnLost
from pallas_runtime.conversations.sql import SqlStore, engine_url
from tests.support.conversations import commit, key, turn, until

LEASE = timedelta(seconds=1)
RENEWED_FOR = 2.0
"""Seconds the holder keeps its turn, renewing: two leases, so without the renewals the other
process would have taken the conversation meanwhile."""


async def test_a_sqlite_lease_is_kept_while_renewed_and_freed_when_it_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease is taken on the driver and renewed through SQLAlchemy: both write one time format."""
    caplog.set_level(logging.DEBUG, logger=sql_module.__name__)
    monkeypatch.setattr(sql_module, "LEASE", LEASE)
    monkeypatch.setattr(sql_module, "RENEW_EVERY", 0.2)
    url = engine_url("sqlite", str(tmp_path / "lease.db"))
    holder, waiter = (SqlStore("sqlite", url, max_messages=100) for _ in range(2))
    for store in (holder, waiter):
        await store.start()
    loop = asyncio.get_running_loop()
    try:
        # A live turn longer than the lease: its renewals keep the other process waiting.
        async with holder.turn(key()) as held:
            started_at = loop.time()
            waiting = asyncio.create_task(commit(waiter, key(), turn(2)))
            await until(lambda: "held by another process's turn" in caplog.text, "the other process waiting")
            await asyncio.sleep(RENEWED_FOR)
            assert not waiting.done(), "the other process took a conversation whose lease was renewed"
            await held.commit(turn(1), "t")
        await waiting
        assert loop.time() - started_at >= RENEWED_FOR
        assert await holder.history(key()) == turn(1) + turn(2)

        # A turn that stops renewing (its process died): the lease runs out and the other goes on.
        monkeypatch.setattr(sql_module, "RENEW_EVERY", 3600.0)
        dying = holder.turn(key())  # kept: a collected context manager would release the lease
        stale_turn = await dying.__aenter__()
        started_at = loop.time()
        await commit(waiter, key(), turn(3))
        assert 0.9 * LEASE.total_seconds() <= loop.time() - started_at < 10
        with pytest.raises(TurnLost, match="nothing was stored"):
            await stale_turn.commit(turn(9), "t")
        assert await waiter.history(key()) == turn(1) + turn(2) + turn(3)
    finally:
        for store in (holder, waiter):
            await store.aclose()
