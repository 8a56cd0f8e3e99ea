"""Budgets' spend in a SQLite file: it goes with the agent identity's conversations."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pallas_runtime.conversations.sql import SqlStore, engine_url
from pallas_runtime.spending.factory import ledger_for
from pallas_runtime.spending.ledger import Bucket
from pallas_runtime.spending.sql_ledger import SqlLedger

START = datetime(2026, 11, 28, tzinfo=UTC)


async def test_a_re_created_agent_starts_without_its_predecessors_spend(tmp_path: Path) -> None:
    url = engine_url("sqlite", str(tmp_path / "conversations.db"))
    old, new, other = "ns/d/a/uid-1", "ns/d/a/uid-2", "ns/d/b/uid-3"
    for identity in (old, other):
        store = SqlStore("sqlite", url, max_messages=200, identity=identity)
        await store.start()
        ledger = ledger_for(store)
        assert isinstance(ledger, SqlLedger)  # spend goes where the conversations go
        await ledger.add([Bucket(identity, "sub:alice", "day", START)], 40, 7)
        await store.aclose()
    store = SqlStore("sqlite", url, max_messages=200, identity=new)  # the same agent, re-created
    await store.start()
    try:
        gone, kept = await SqlLedger(store).read(
            [Bucket(old, "sub:alice", "day", START), Bucket(other, "sub:alice", "day", START)]
        )
    finally:
        await store.aclose()
    assert (gone.tokens, gone.micros) == (0, 0)
    assert (kept.tokens, kept.micros) == (40, 7)  # another agent's spend is its own
