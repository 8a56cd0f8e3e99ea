"""The wire shapes of MCP's tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663).

One set for both halves: the agent writes them (`server.tasks`, dumped by alias) and `pallas
chat` reads them (`commands.chat.tasks`, validated by alias). They are the extension's own shapes,
not the SDK's `mcp_types.Task` (the 2025-11-25 experiment, with `ttl`/`pollInterval` and a nested
`task`): a flat `CreateTaskResult` with `resultType: "task"`, `ttlMs`, `pollIntervalMs`, and a
`tasks/get` result that inlines `result`, `error` or `inputRequests` (as `fastmcp-tasks` writes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import mcp_types
from fastmcp.server.extensions import MethodBinding, read_client_extension_settings
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
"""The revisions the extension lives at (2026-07-28)."""
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
TASK_LOST = "the agent process that ran the turn stopped before it finished (the turn is lost)"
"""The `error.message` of a task whose process went away mid-turn (a crash, a killed pod)."""


class TaskFields(Result):
    """The task fields every task result carries."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: TaskStatus
    created_at: str | None = Field(default=None, alias="createdAt")
    last_updated_at: str | None = Field(default=None, alias="lastUpdatedAt")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreateTaskResult(TaskFields):
    """A `tools/call` answered with a task."""

    result_type: Literal["task"] = Field(default="task", alias="resultType")


class GetTaskResult(TaskFields):
    """`tasks/get`: the task, with its `result`, `error` or `inputRequests` inlined."""

    result_type: Literal["complete"] = Field(default="complete", alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class Ack(Result):
    """The answer of `tasks/update` and `tasks/cancel`."""

    result_type: Literal["complete"] = Field(default="complete", alias="resultType")


class TaskParams(RequestParams):
    """`tasks/get`, `tasks/cancel`: the task's id."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId", max_length=64)


class UpdateParams(TaskParams):
    """`tasks/update`: the task's id and the answers to its input requests."""

    input_responses: dict[str, Any] = Field(alias="inputResponses")


class GetTask(mcp_types.Request[TaskParams, Literal["tasks/get"]]):
    """The `tasks/get` request (a client sends it)."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class UpdateTask(mcp_types.Request[UpdateParams, Literal["tasks/update"]]):
    """The `tasks/update` request."""

    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams


class CancelTask(mcp_types.Request[TaskParams, Literal["tasks/cancel"]]):
    """The `tasks/cancel` request."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


def require_extension(ctx: ServerRequestContext[Any, Any], method: str) -> None:
    """Refuse `method` unless the request opts the tasks extension in (SEP-2663, SEP-2575).

    The extension is negotiated per request (its `_meta` client capabilities), so a `tasks/*`
    request that does not name it is -32021 MissingRequiredClientCapability, not "no task": the
    conformance suite (0.2.0-alpha, `tasks-capability-negotiation`) checks it.

    Raises:
        MCPError: -32021, its data the capabilities the request needs.
    """
    if read_client_extension_settings(ctx, TASKS_EXTENSION) is not None:
        return
    needed = mcp_types.MissingRequiredClientCapabilityErrorData(
        required_capabilities=mcp_types.ClientCapabilities(extensions={TASKS_EXTENSION: {}})
    )
    raise MCPError(
        mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{method} needs the {TASKS_EXTENSION} extension in the request's client capabilities",
        needed.model_dump(by_alias=True, exclude_none=True),
    )


def task_methods(
    get: Callable[..., Any],
    update: Callable[..., Any],
    cancel: Callable[..., Any],
    *,
    params: type[RequestParams] = TaskParams,
    update_params: type[RequestParams] = UpdateParams,
) -> tuple[MethodBinding, ...]:
    """`tasks/get`, `tasks/update`, `tasks/cancel` bound to their handlers, at the extension's revisions."""
    return (
        MethodBinding("tasks/get", params, get, MODERN),
        MethodBinding("tasks/update", update_params, update, MODERN),
        MethodBinding("tasks/cancel", params, cancel, MODERN),
    )
