"""The client half of MCP's tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663).

fastmcp 4.1.2's client folds in a tasks extension only when the `fastmcp-tasks` package is
imported, and that package brings Docket and Redis for its server half, which Pallas does not use
(`server.tasks` keeps tasks in the conversation store). This is the client half alone, on the MCP
SDK's extension API (`ClientExtension`, `ResultClaim`): advertising it makes an agent run
`send_message` as a task, `start` returns the task's handle, and `poll` follows it with
`tasks/get` — on any connection, so a dropped one is replaced and the same task polled again
instead of the message being sent twice. A question the task asks (`input_required`, an
approval) is answered with `tasks/update`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pallas_runtime.task_wire import (
    TASKS_EXTENSION,
    TERMINAL,
    CancelTask,
    CreateTaskResult,
    GetTask,
    GetTaskResult,
    TaskParams,
    UpdateParams,
    UpdateTask,
)

TaskHandle = CreateTaskResult
"""What a `tools/call` run as a task answers at once."""
TaskState = GetTaskResult
"""`tasks/get`: the task, with its `result`, `error` or `inputRequests`."""

MIN_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 2.0


Answer = Callable[[mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]
"""Answers one question of a task (the chat's approval prompt)."""
Seen = Callable[[TaskState], Awaitable[None]]
"""Shown each polled state (its status message is the turn's progress)."""


async def get(session: ClientSession, task_id: str) -> TaskState:
    """`tasks/get`."""
    return await session.send_request(GetTask(params=TaskParams(taskId=task_id)), TaskState)


async def cancel(session: ClientSession, task_id: str) -> None:
    """`tasks/cancel`."""
    await session.send_request(CancelTask(params=TaskParams(taskId=task_id)), mcp_types.Result)


async def answer(session: ClientSession, state: TaskState, ask: Answer | None) -> None:
    """Answer the task's questions with `ask` (a question nobody can answer is cancelled)."""
    responses: dict[str, Any] = {}
    for key, payload in (state.input_requests or {}).items():
        request = mcp_types.ElicitRequest.model_validate(payload)
        result = mcp_types.ElicitResult(action="cancel") if ask is None else await ask(request.params)
        responses[key] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    params = UpdateParams(taskId=state.task_id, inputResponses=responses)
    await session.send_request(UpdateTask(params=params), mcp_types.Result)


async def poll(
    session: ClientSession, task_id: str, *, ask: Answer | None = None, seen: Seen | None = None
) -> TaskState:
    """Follow the task to its end, answering its questions; its final state."""
    delay = MIN_POLL_SECONDS
    while True:
        state = await get(session, task_id)
        if seen is not None:
            await seen(state)
        if state.status in TERMINAL:
            return state
        if state.status == "input_required":
            await answer(session, state, ask)
            delay = MIN_POLL_SECONDS
            continue
        ceiling = (state.poll_interval_ms or 1000) / 1000
        await asyncio.sleep(min(delay, ceiling))
        delay = min(delay * 2, MAX_POLL_SECONDS)


def outcome(state: TaskState) -> CallToolResult:
    """The tool's result of a finished task (a failed or cancelled one as an error result)."""
    if state.status == "completed" and state.result is not None:
        return CallToolResult.model_validate(state.result)
    message = (state.error or {}).get("message") or state.status_message or f"the task was {state.status}"
    return CallToolResult(content=[mcp_types.TextContent(type="text", text=str(message))], is_error=True)


class TasksClient(ClientExtension):
    """Advertises the tasks extension; a call answered with a task is polled to its result."""

    identifier = TASKS_EXTENSION

    def __init__(self, ask: Answer | None = None) -> None:
        self._ask = ask

    def claims(self) -> Sequence[ResultClaim[Any]]:
        """`resultType: "task"` on `tools/call`, at the 2026-07-28 revision."""
        return (
            ResultClaim(
                result_type="task",
                model=TaskHandle,
                resolve=self._resolve,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )

    async def _resolve(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        return outcome(await poll(ctx.session, handle.task_id, ask=self._ask))
