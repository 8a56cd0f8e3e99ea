"""Tasks (MCP's `io.modelcontextprotocol/tasks` extension) kept beside the conversations.

A task is one `send_message` turn that outlives the request that started it: its status, last
progress message, input it waits for (an approval question), the answers given, and its result
are records here, so a client polls `tasks/get` on any connection. Where they are kept follows
the conversation store (`task_store_for`): a database store's table (`pallas_tasks`, any replica
answers), else the process's memory (one pod answers: the one that ran the turn).

A finished task is kept `ttl` seconds after it ended, then forgotten (`tasks/get` answers "no
such task"); a running one never expires. The turn itself runs in the process that started it
(`server.tasks`); another replica learns of a cancel or an answer through the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from pallas_runtime.conversations.model import ConversationStore

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
MAX_TASKS_IN_MEMORY = 10_000
"""Finished tasks a memory store keeps at most (the oldest go first): a bound on a pod's memory."""


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as kept: who owns it, where it stands, and what it produced."""

    agent: str
    """The agent's identity (as conversations are keyed)."""
    owner: str
    """The caller that started it; nobody else sees it."""
    id: str
    status: TaskStatus
    created_at: datetime
    updated_at: datetime
    status_message: str | None = None
    result: dict[str, Any] | None = None
    """The `CallToolResult` (wire JSON) of a completed task."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error (`code`, `message`) of a failed task."""
    input_requests: dict[str, Any] | None = None
    """What an `input_required` task asks (keyed elicitation requests, wire JSON)."""
    input_responses: dict[str, Any] | None = None
    """Answers delivered by `tasks/update` (or an MRTR retry), not yet taken by the turn."""
    cancel_requested: bool = False
    expires_at: datetime | None = None
    """When a finished task is forgotten; None while it runs."""

    @property
    def finished(self) -> bool:
        """Completed, failed or cancelled."""
        return self.status in TERMINAL


def now() -> datetime:
    """The store's clock (UTC)."""
    return datetime.now(UTC)


class TaskStore(Protocol):
    """Where an agent keeps its tasks (memory, or the conversation store's database)."""

    shared: bool
    """Every replica sees the same records (a database); False: this process only."""

    async def create(self, record: TaskRecord) -> None:
        """Keep a new task."""

    async def get(self, agent: str, task_id: str) -> TaskRecord | None:
        """The task, or None when there is none (or it expired)."""

    async def change(self, agent: str, task_id: str, **fields: Any) -> None:
        """Set some fields of a task (and `updated_at`); a missing task is left missing."""


@dataclass
class MemoryTaskStore:
    """Tasks in a dict, for one process; finished ones beyond `MAX_TASKS_IN_MEMORY` go oldest first."""

    shared: bool = False
    _items: dict[tuple[str, str], TaskRecord] = field(default_factory=dict)

    async def create(self, record: TaskRecord) -> None:
        """Keep a new task, dropping expired and surplus finished ones."""
        self._items[(record.agent, record.id)] = record
        self._prune()

    async def get(self, agent: str, task_id: str) -> TaskRecord | None:
        """The task unless it expired."""
        record = self._items.get((agent, task_id))
        if record is not None and record.expires_at is not None and record.expires_at <= now():
            del self._items[(agent, task_id)]
            return None
        return record

    async def change(self, agent: str, task_id: str, **fields: Any) -> None:
        """Set some fields of a task."""
        record = self._items.get((agent, task_id))
        if record is not None:
            self._items[(agent, task_id)] = replace(record, updated_at=now(), **fields)

    def _prune(self) -> None:
        moment = now()
        for key, record in list(self._items.items()):
            if record.expires_at is not None and record.expires_at <= moment:
                del self._items[key]
        finished = [k for k, r in self._items.items() if r.finished]
        for key in finished[: max(0, len(finished) - MAX_TASKS_IN_MEMORY)]:
            del self._items[key]


def expiry(ttl_seconds: float) -> datetime:
    """When a task finishing now is forgotten."""
    return now() + timedelta(seconds=ttl_seconds)


def task_store_for(store: ConversationStore) -> TaskStore:
    """Tasks kept where the conversations are: a database store's table, else in memory.

    The SQL task store (and sqlalchemy with it) is imported only for a database store.
    """
    if store.kind == "memory":
        return MemoryTaskStore()
    from pallas_runtime.conversations.sql import SqlStore
    from pallas_runtime.conversations.sql_tasks import SqlTaskStore

    return SqlTaskStore(store) if isinstance(store, SqlStore) else MemoryTaskStore()
