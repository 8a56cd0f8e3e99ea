"""The task stores (`conversations.tasks`): memory and SQLite keep, change and expire tasks alike."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.conversations.sql import SqlStore, engine_url
from pallas_runtime.conversations.tasks import TaskRecord, TaskStore, now, task_store_for
from tests.support.conversations import started

Opened = Callable[[Path], contextlib.AbstractAsyncContextManager[TaskStore]]


@contextlib.asynccontextmanager
async def in_memory(_: Path) -> AsyncIterator[TaskStore]:
    store = MemoryStore(max_conversations=10, max_messages=10)
    async for running in started(store):
        yield task_store_for(running)


@contextlib.asynccontextmanager
async def in_sqlite(tmp: Path) -> AsyncIterator[TaskStore]:
    store = SqlStore("sqlite", engine_url("sqlite", str(tmp / "tasks.db")), max_messages=10, turn_wait=5)
    async for running in started(store):
        yield task_store_for(running)


STORES: list[Any] = [pytest.param(in_memory, id="memory"), pytest.param(in_sqlite, id="sqlite")]


def record(task_id: str = "t1", status: Any = "working", **fields: Any) -> TaskRecord:
    moment = now()
    return TaskRecord("ns/dep/harper", "sub:ann", task_id, status, moment, moment, **fields)


@pytest.mark.parametrize("opened", STORES)
async def test_a_task_is_kept_changed_and_read_back(opened: Opened, tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        await store.create(record())
        question = {"approval-1": {"method": "elicitation/create", "params": {"message": "ok?"}}}
        await store.change("ns/dep/harper", "t1", status="input_required", input_requests=question)
        got = await store.get("ns/dep/harper", "t1")
        assert got is not None
        assert (got.status, got.owner, got.input_requests) == ("input_required", "sub:ann", question)
        assert got.updated_at >= got.created_at
        assert await store.get("ns/dep/other", "t1") is None  # another agent's ids are its own


@pytest.mark.parametrize("opened", STORES)
async def test_a_finished_task_is_gone_once_it_expired(opened: Opened, tmp_path: Path) -> None:
    async with opened(tmp_path) as store:
        await store.create(record("old", status="completed", expires_at=now() - timedelta(seconds=1)))
        await store.create(
            record("new", status="completed", result={"content": []}, expires_at=now() + timedelta(hours=1))
        )
        assert await store.get("ns/dep/harper", "old") is None
        kept = await store.get("ns/dep/harper", "new")
        assert kept is not None
        assert kept.result == {"content": []}


async def test_only_a_database_store_is_shared_by_replicas(tmp_path: Path) -> None:
    async with in_memory(tmp_path) as memory, in_sqlite(tmp_path) as sqlite:
        assert (memory.shared, sqlite.shared) == (False, True)
