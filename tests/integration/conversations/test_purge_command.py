"""`pallas conversations purge` on the real stores: a deleted agent's conversations go, no one else's."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from pallas_runtime.conversations.sql import SqlStore, engine_url
from tests.support.conversations import commit, key, turn
from tests.support.postgres import PASSWORD, Postgres

pytestmark = pytest.mark.timeout(120)

OBSERVER = "ns/dep/observer/u0"
"""The agent whose store the test reads through: another agent running on the same database."""


def purge(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command as the operator's Job runs it: its own process, its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "pallas_runtime", "conversations", "purge", *flags],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


async def deleted_agents_lose_their_conversations(
    store: SqlStore, where: list[str], env: dict[str, str]
) -> None:
    """Two agents of one deployment: the deleted one's rows go at once, the other's after its retention."""
    suffix = secrets.token_hex(4)
    gone, kept = f"ns/dep/gone{suffix}/u1", f"ns/dep/kept{suffix}/u2"
    await commit(store, key("a", agent=gone), turn(1))
    await commit(store, key("b", owner="sub:alice", agent=gone), turn(2))
    await commit(store, key("a", agent=kept), turn(3))

    done = await asyncio.to_thread(purge, "--identity", gone, *where, env=env)
    assert done.returncode == 0, done.stderr
    assert f"deleted 2 conversations of {gone}" in done.stdout
    assert await store.history(key("a", agent=gone)) is None
    assert await store.history(key("b", owner="sub:alice", agent=gone)) is None
    assert await store.history(key("a", agent=kept)) == turn(3)

    # A retention: the rows stay, and any agent's housekeeping deletes them once it ran out.
    # Four seconds of retention: under a loaded CI the command's own exit took over one.
    marked = await asyncio.to_thread(purge, "--identity", kept, "--after", "4", *where, env=env)
    assert marked.returncode == 0, marked.stderr
    await store.housekeeping()
    assert await store.history(key("a", agent=kept)) == turn(3)
    await asyncio.sleep(4.2)
    await store.housekeeping()
    assert await store.history(key("a", agent=kept)) is None

    refused = await asyncio.to_thread(purge, "--identity", "not-an-identity", *where, env=env)
    assert refused.returncode == 2
    assert "is not an agent identity" in refused.stderr


async def test_a_sqlite_store_loses_a_deleted_agents_conversations(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    store = SqlStore("sqlite", engine_url("sqlite", str(path)), max_messages=100, identity=OBSERVER)
    await store.start()
    try:
        await deleted_agents_lose_their_conversations(store, ["--sqlite", str(path)], {})
    finally:
        await store.aclose()


async def test_a_postgres_store_loses_a_deleted_agents_conversations_and_an_outage_exits_1(
    postgres: Postgres,
) -> None:
    store = SqlStore(
        "postgres", engine_url("postgres", postgres.dsn), max_messages=100, secret=PASSWORD, identity=OBSERVER
    )
    await store.start()
    try:
        env = {"PURGE_DSN": postgres.dsn}
        await deleted_agents_lose_their_conversations(store, ["--dsn-env", "PURGE_DSN"], env)
    finally:
        await store.aclose()
    wrong = postgres.dsn.replace(PASSWORD, "not-the-password")
    failed = await asyncio.to_thread(
        purge, "--identity", "ns/dep/x/u9", "--dsn-env", "PURGE_DSN", env={"PURGE_DSN": wrong}
    )
    assert failed.returncode == 1
    assert "conversation store unavailable" in failed.stderr
    assert "not-the-password" not in failed.stderr
    unset = await asyncio.to_thread(purge, "--identity", "ns/dep/x/u9", "--dsn-env", "PURGE_UNSET_DSN")
    assert unset.returncode == 2
    assert "$PURGE_UNSET_DSN is not set" in unset.stderr
