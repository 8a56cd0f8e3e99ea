"""Tasks in the conversation store's database: SQLite or PostgreSQL (see `conversations.tasks`).

A module of its own so that an agent on the memory store never imports sqlalchemy. JSON fields
are kept as text (the same in both databases); expired rows are deleted when a task is created.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, select, update

from pallas_runtime.conversations.sql import SqlStore
from pallas_runtime.conversations.tables import tasks
from pallas_runtime.conversations.tasks import TaskRecord, now

_JSON_FIELDS = ("result", "error", "input_requests", "input_responses")


def _dumped(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (json.dumps(v) if k in _JSON_FIELDS and v is not None else v) for k, v in fields.items()}


def _record(row: Any) -> TaskRecord:
    values = dict(row._mapping)
    for name in _JSON_FIELDS:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return TaskRecord(**values)


class SqlTaskStore:
    """Tasks in the database every replica shares: any of them answers `tasks/get`."""

    shared = True

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    async def create(self, record: TaskRecord) -> None:
        """Insert the task; delete expired ones in the same transaction."""
        values = _dumped({name: getattr(record, name) for name in TaskRecord.__dataclass_fields__})

        def create(connection: Connection) -> None:
            connection.execute(delete(tasks).where(tasks.c.expires_at < now()))
            connection.execute(insert(tasks).values(**values))

        await self._store.run(create)

    async def get(self, agent: str, task_id: str) -> TaskRecord | None:
        """The task unless it expired."""

        def get(connection: Connection) -> TaskRecord | None:
            row = connection.execute(
                select(tasks).where(and_(tasks.c.agent == agent, tasks.c.id == task_id))
            ).first()
            if row is None:
                return None
            record = _aware(_record(row))
            if record.expires_at is not None and record.expires_at <= now():
                return None
            return record

        return await self._store.run(get)

    async def change(self, agent: str, task_id: str, **fields: Any) -> None:
        """Set some fields (and `updated_at`) in one statement."""
        values = _dumped({**fields, "updated_at": now()})

        def change(connection: Connection) -> None:
            connection.execute(
                update(tasks).where(and_(tasks.c.agent == agent, tasks.c.id == task_id)).values(**values)
            )

        await self._store.run(change)


def _aware(record: TaskRecord) -> TaskRecord:
    """SQLite hands datetimes back without their zone: they were stored as UTC."""

    def fix(value: Any) -> Any:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    return replace(
        record,
        created_at=fix(record.created_at),
        updated_at=fix(record.updated_at),
        expires_at=fix(record.expires_at),
    )
