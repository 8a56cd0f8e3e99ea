"""The MCP tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on `send_message`.

Built on fastmcp's extension API (`fastmcp.server.extensions.ServerExtension`): the extension is
advertised in the server's capabilities, serves `tasks/get`, `tasks/update` and `tasks/cancel`,
and intercepts `tools/call`. A `send_message` call whose request opts the extension in (its
`_meta` client capabilities name `io.modelcontextprotocol/tasks`; fastmcp's client and `pallas
chat` do) is answered at once with a task (`resultType: "task"`); the turn runs on as a held
turn (`server.held`) and the client polls. fastmcp's own server half (the `fastmcp-tasks`
package) keeps tasks in a Docket/Redis queue; ours are kept where the conversations are
(`conversations.tasks`), so no second database is needed and any replica of a database store
answers.

The wire shapes are the extension's (`task_wire`), as `fastmcp-tasks` writes them.
A task belongs to the caller that started it: another caller's `tasks/get` finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import mcp_types
from fastmcp.server.context import Context
from fastmcp.server.extensions import MethodBinding, ServerExtension, ToolCallContinuation, ToolCallOutcome
from fastmcp.tools import ToolResult
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams

from pallas_api.names import CHUNKS_META
from pallas_runtime.approval.elicit import RELAY_META
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.conversations.tasks import TaskRecord
from pallas_runtime.server.held import POLL_INTERVAL_MS, HeldTurns, TaskNotFound
from pallas_runtime.task_wire import (
    MODERN,
    TASKS_EXTENSION,
    Ack,
    CreateTaskResult,
    GetTaskResult,
    TaskParams,
    UpdateParams,
    require_extension,
    task_methods,
)


def _stamp(record: TaskRecord) -> str:
    return record.updated_at.isoformat()


def fields_of(record: TaskRecord, ttl_seconds: float) -> dict[str, Any]:
    """The flat task fields of `record`."""
    return {
        "task_id": record.id,
        "status": record.status,
        "created_at": record.created_at.isoformat(),
        "last_updated_at": _stamp(record),
        "ttl_ms": int(ttl_seconds * 1000),
        "status_message": record.status_message,
        "poll_interval_ms": POLL_INTERVAL_MS,
    }


class SendMessageTasks(ServerExtension):
    """Runs a `send_message` call as a task when the request opts in; serves `tasks/*`."""

    identifier = TASKS_EXTENSION

    def __init__(self, held: HeldTurns, names: Callable[[], Collection[str]]) -> None:
        self._held = held
        self._names = names

    def clone(self) -> SendMessageTasks:
        """The same turns (never deep-copied: they hold running asyncio tasks)."""
        return SendMessageTasks(self._held, self._names)

    def methods(self) -> Sequence[MethodBinding]:
        """`tasks/get`, `tasks/update`, `tasks/cancel`, at the 2026-07-28 revision (the extension's)."""
        return task_methods(self._get, self._update, self._cancel)

    async def intercept_tool_call(
        self, params: CallToolRequestParams, context: Context, call_next: ToolCallContinuation
    ) -> ToolCallOutcome:
        """A task for an opted-in `send_message`; any other call passes through."""
        request = context.request_context
        if (
            params.name not in self._names()
            or request is None
            or request.protocol_version not in MODERN
            or context.client_extension_settings(TASKS_EXTENSION) is None
        ):
            return await call_next()
        meta = request.meta if isinstance(request.meta, dict) else {}
        relay = meta.get(RELAY_META)

        async def body() -> ToolResult:
            outcome = await call_next()
            assert isinstance(outcome, ToolResult)  # send_message's own result
            return outcome

        try:
            record = await self._held.start(
                current_caller().owner,
                body,
                relay=relay if isinstance(relay, str) and relay else None,
                chunks=meta.get(CHUNKS_META) is True,
            )
        except StoreUnavailable as exc:
            raise MCPError(mcp_types.INTERNAL_ERROR, f"the task could not be kept: {exc}") from None
        return CreateTaskResult(**fields_of(record, self._held.ttl_seconds))

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> GetTaskResult:
        require_extension(ctx, "tasks/get")
        record = await self._found(params.task_id, self._held.get)
        return GetTaskResult(
            **fields_of(record, self._held.ttl_seconds),
            result=record.result,
            error=record.error,
            inputRequests=record.input_requests if record.status == "input_required" else None,
        )

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> Ack:
        require_extension(ctx, "tasks/update")
        owner = current_caller().owner
        try:
            await self._held.answer(owner, params.task_id, params.input_responses)
        except TaskNotFound:
            raise _not_found(params.task_id) from None
        return Ack()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> Ack:
        require_extension(ctx, "tasks/cancel")
        await self._found(params.task_id, self._held.cancel)
        return Ack()

    @staticmethod
    async def _found(task_id: str, action: Callable[[str, str], Any]) -> TaskRecord:
        try:
            record: TaskRecord = await action(current_caller().owner, task_id)
        except TaskNotFound:
            raise _not_found(task_id) from None
        except StoreUnavailable as exc:
            raise MCPError(mcp_types.INTERNAL_ERROR, f"the task store is unavailable: {exc}") from None
        return record


def _not_found(task_id: str) -> MCPError:
    return MCPError(
        mcp_types.INVALID_PARAMS,
        f"no task {task_id!r} of this caller (never started, another caller's, or expired after its TTL)",
    )
