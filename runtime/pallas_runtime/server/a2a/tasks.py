"""Where an agent keeps its A2A tasks: in memory, per caller, and not without end.

The SDK's `InMemoryTaskStore` keeps every task until the process stops; an agent answering
A2A for weeks would grow by every answer it ever gave. This store keeps the `limit` newest
tasks of the agent: once more are saved, the oldest finished ones (completed, failed, rejected,
canceled) are dropped, so `GetTask` answers "task not found" for them. A running task is never
dropped. The answers themselves live on in the conversation (the task's `contextId`).
"""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task

DEFAULT_LIMIT = 1000
"""Tasks one agent process keeps (its `history.maxConversations` by default)."""


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory store, keeping at most `limit` tasks (the oldest finished go first)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._limit = limit
        self._tasks = InMemoryTaskStore()
        self._order: OrderedDict[tuple[str, str], ServerCallContext] = OrderedDict()
        """(owner, task id) → a context of its owner, oldest first."""
        self._finished: set[tuple[str, str]] = set()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save `task` for its caller, then drop the oldest finished tasks over the limit."""
        key = (resolve_user_scope(context), task.id)
        await self._tasks.save(task, context)
        self._order.setdefault(key, context)
        if task.status.state in TERMINAL_TASK_STATES:
            self._finished.add(key)
        else:
            self._finished.discard(key)
        excess = len(self._order) - self._limit
        if excess <= 0:
            return
        for old in [k for k in self._order if k in self._finished][:excess]:
            await self._tasks.delete(old[1], self._order.pop(old))
            self._finished.discard(old)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The caller's task of this id, if kept."""
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks."""
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the caller's task of this id."""
        await self._tasks.delete(task_id, context)
        key = (resolve_user_scope(context), task_id)
        self._order.pop(key, None)
        self._finished.discard(key)
