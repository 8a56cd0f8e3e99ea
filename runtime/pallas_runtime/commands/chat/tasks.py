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
from typing import Any, Literal

import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
MIN_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 2.0


class _Fields(Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")


class TaskHandle(_Fields):
    """What a `tools/call` run as a task answers at once."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_Fields):
    """`tasks/get`: the task, with its `result`, `error` or `inputRequests`."""

    result_type: Literal["complete"] = Field(default="complete", alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class _TaskParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")


class _UpdateParams(_TaskParams):
    input_responses: dict[str, Any] = Field(serialization_alias="inputResponses")


class _Get(mcp_types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams


class _Update(mcp_types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _UpdateParams


class _Cancel(mcp_types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams


Answer = Callable[[mcp_types.ElicitRequestParams], Awaitable[mcp_types.ElicitResult]]
"""Answers one question of a task (the chat's approval prompt)."""
Seen = Callable[[TaskState], Awaitable[None]]
"""Shown each polled state (its status message is the turn's progress)."""


async def get(session: ClientSession, task_id: str) -> TaskState:
    """`tasks/get`."""
    return await session.send_request(_Get(params=_TaskParams(task_id=task_id)), TaskState)


async def cancel(session: ClientSession, task_id: str) -> None:
    """`tasks/cancel`."""
    await session.send_request(_Cancel(params=_TaskParams(task_id=task_id)), mcp_types.Result)


async def answer(session: ClientSession, state: TaskState, ask: Answer | None) -> None:
    """Answer the task's questions with `ask` (a question nobody can answer is cancelled)."""
    responses: dict[str, Any] = {}
    for key, payload in (state.input_requests or {}).items():
        request = mcp_types.ElicitRequest.model_validate(payload)
        result = mcp_types.ElicitResult(action="cancel") if ask is None else await ask(request.params)
        responses[key] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    params = _UpdateParams(task_id=state.task_id, input_responses=responses)
    await session.send_request(_Update(params=params), mcp_types.Result)


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
