"""Where an agent keeps its A2A tasks: in memory, per caller, owned, and not without end.

The SDK's `InMemoryTaskStore` keeps every task until the process stops; an agent answering
A2A for weeks would grow by every answer it ever gave. This store keeps the `limit` newest
tasks of the agent, and at most `max_bytes` of them (their protobuf size: the messages, the
answer and the metadata): once more are saved, the oldest finished ones (completed, failed,
rejected, canceled) are dropped, so `GetTask` answers "task not found" for them. A running task
is never dropped. The answers themselves live on in the conversation (the task's `contextId`).

Tasks are owned as MCP conversations are (`conversations.scope`): the SDK keys them by the
caller's owner, so one authenticated caller never reads another's. Without inbound auth every
client is the one anonymous caller; an MCP session is then told only of the conversations it
started or named, and an A2A request has no session, so an anonymous client of an agent that
does not share everything on purpose (`caller` scope) is listed no task at all. A task stays
reachable by its id (`GetTask`, `CancelTask`), which only the client that sent it was told.
"""

from __future__ import annotations

from collections import OrderedDict

from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task

from pallas_api.fields import ConversationScope
from pallas_runtime.conversations.scope import sees_only_its_session
from pallas_runtime.server.a2a.inbound import inbound_of
from pallas_runtime.sizes import MiB

DEFAULT_LIMIT = 1000
"""Tasks one agent process keeps (its `history.maxConversations` by default)."""
MAX_TASK_BYTES = 16 * MiB
"""Bytes of tasks one agent process keeps: a task may carry a 4 MiB message, so the count alone
let 1,000 of them hold gigabytes."""

TaskKey = tuple[str, str]
"""(owner, task id)."""


class BoundedTaskStore(TaskStore):
    """The SDK's in-memory store, keeping at most `limit` tasks and `max_bytes` of them."""

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        *,
        scope: ConversationScope = "session",
        max_bytes: int = MAX_TASK_BYTES,
    ) -> None:
        self._limit = limit
        self._max_bytes = max_bytes
        self._scope = scope
        self._tasks = InMemoryTaskStore()
        self._order: OrderedDict[TaskKey, ServerCallContext] = OrderedDict()
        """(owner, task id) → a context of its owner, oldest first."""
        self._sizes: dict[TaskKey, int] = {}
        self._bytes = 0
        self._finished: set[TaskKey] = set()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save `task` for its caller, then drop the oldest finished tasks over the bounds."""
        key = (resolve_user_scope(context), task.id)
        await self._tasks.save(task, context)
        self._order.setdefault(key, context)
        size = task.ByteSize()
        self._bytes += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        if task.status.state in TERMINAL_TASK_STATES:
            self._finished.add(key)
        else:
            self._finished.discard(key)
        if self._within_bounds():
            return
        for old in [k for k in self._order if k in self._finished]:
            await self._tasks.delete(old[1], self._order[old])
            self._forget(old)
            if self._within_bounds():
                return

    def _within_bounds(self) -> bool:
        return len(self._order) <= self._limit and self._bytes <= self._max_bytes

    def _forget(self, key: TaskKey) -> None:
        self._order.pop(key, None)
        self._bytes -= self._sizes.pop(key, 0)
        self._finished.discard(key)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The caller's task of this id, if kept."""
        return await self._tasks.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks; none for an anonymous client, which cannot be told from the others."""
        if sees_only_its_session(self._scope, inbound_of(context).caller):
            return ListTasksResponse(page_size=params.page_size, total_size=0)
        return await self._tasks.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the caller's task of this id."""
        await self._tasks.delete(task_id, context)
        self._forget((resolve_user_scope(context), task_id))
