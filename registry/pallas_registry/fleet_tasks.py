"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on the fleet's agent tools.

A task-augmented call of an agent's tool on the fleet (`/mcp` on the registry, `fleet`) is relayed
as a task **of the agent**: the fleet calls the agent's `send_message` at the 2026-07-28 revision
with the tasks extension opted in and the caller's credential, and answers with the agent's task,
its id prefixed with the agent's name (`<agent>.<agent's task id>`). `tasks/get`, `tasks/update`
and `tasks/cancel` on the fleet are relayed the same way, each on a connection of its own.

Why the agent's task and not one of the fleet's own: the turn runs in the agent and is kept where
the agent keeps its tasks (its conversation store), so it outlives the fleet client's connection,
the registry's connection to the agent, and the registry itself (a restart, another replica: the
fleet keeps nothing, the id says where the task is). The agent checks the caller's credential and
the task's owner itself, as for a direct call; the fleet checks first that the caller may invoke
that agent (`Fleet.admission`), so another caller learns nothing through it either.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.context import Context
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.extensions import MethodBinding, ServerExtension, ToolCallContinuation, ToolCallOutcome
from fastmcp.tools import ToolResult
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams
from pydantic import ConfigDict, Field

from pallas_runtime import task_wire as wire
from pallas_runtime.downstream.peer_agent import SEND_MESSAGE
from pallas_runtime.task_wire import MODERN, TASKS_EXTENSION, CreateTaskResult, require_extension

SEPARATOR = "."
"""Between the agent's name and its task id: never in an agent's name (a DNS label)."""
AGENT_TASK_ID_MAX = 64
"""The longest task id an agent takes (`task_wire.TaskParams`)."""
RELAY_TIMEOUT = 30.0
"""Seconds one relayed request (a task's start, get, update or cancel) may take."""


class FleetTaskParams(RequestParams):
    """`tasks/get`, `tasks/cancel` on the fleet: the id is the agent's name and the agent's id."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId", max_length=160)


class FleetUpdateParams(FleetTaskParams):
    """`tasks/update` on the fleet."""

    input_responses: dict[str, Any] = Field(alias="inputResponses")


class Agents(Protocol):
    """What the tasks extension needs of the fleet."""

    def endpoint(self, name: str) -> str | None:
        """The MCP URL of agent `name` as the fleet offers it now; None: not offered."""
        ...

    async def admission(self, name: str, token: str | None) -> ToolResult | None:
        """None when the caller may invoke agent `name`, else the error result saying why not."""
        ...

    def conversation_id(self, name: str, credential: str | None) -> str:
        """The `conversation_id` a sessionless fleet call to agent `name` passes on."""
        ...


def fleet_task_id(agent: str, task_id: str) -> str:
    """The id the fleet's caller knows the agent's task by."""
    return f"{agent}{SEPARATOR}{task_id}"


def _not_found(task_id: str) -> MCPError:
    return MCPError(
        mcp_types.INVALID_PARAMS,
        f"no task {task_id!r} of this caller (never started, another caller's, or expired after its TTL)",
    )


class FleetTasks(ServerExtension):
    """Relays the fleet's task-augmented agent calls, and `tasks/*`, to the agents' own tasks."""

    identifier = TASKS_EXTENSION

    def __init__(self, agents: Agents, bearer: Callable[[str | None], str | None]) -> None:
        self._agents = agents
        self._bearer = bearer

    def clone(self) -> FleetTasks:
        """The same relay (it keeps nothing of its own)."""
        return FleetTasks(self._agents, self._bearer)

    def methods(self) -> Sequence[MethodBinding]:
        """`tasks/get`, `tasks/update`, `tasks/cancel`, at the 2026-07-28 revision (the extension's)."""
        return wire.task_methods(
            self._get, self._update, self._cancel, params=FleetTaskParams, update_params=FleetUpdateParams
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, context: Context, call_next: ToolCallContinuation
    ) -> ToolCallOutcome:
        """An opted-in call of an agent's tool starts a task of the agent; others pass through."""
        request = context.request_context
        message = (params.arguments or {}).get("message")
        if (
            self._agents.endpoint(params.name) is None
            or request is None
            or request.protocol_version not in MODERN
            or context.client_extension_settings(TASKS_EXTENSION) is None
            or not isinstance(message, str)  # the tool's own validation says what is wrong
        ):
            return await call_next()
        name = params.name
        credential = _credential()
        if (refusal := await self._agents.admission(name, self._bearer(credential))) is not None:
            return refusal
        arguments = {"message": message, "conversation_id": self._agents.conversation_id(name, credential)}
        try:
            async with self._agent(name, credential) as session:
                started = await session.call_tool(SEND_MESSAGE, arguments, allow_claimed=True)
        except MCPError:
            raise  # the agent's own error, as a direct call gets it
        except Exception as exc:  # noqa: BLE001 - the agent unreachable: said, not a crash
            raise MCPError(
                mcp_types.INTERNAL_ERROR, f"agent {name}: could not start the task: {exc}"
            ) from None
        if isinstance(started, CreateTaskResult):
            return CreateTaskResult.model_validate(
                {**_fields(started), "taskId": fleet_task_id(name, started.task_id)}
            )
        if isinstance(
            started, mcp_types.CallToolResult
        ):  # an agent that answered in place: so does the fleet
            return ToolResult(
                content=started.content,
                structured_content=started.structured_content,
                is_error=started.is_error,
            )
        raise MCPError(mcp_types.INTERNAL_ERROR, f"agent {name} answered with neither a task nor a result")

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: FleetTaskParams) -> Any:
        require_extension(ctx, "tasks/get")
        async with self._task(params.task_id) as (session, task_id):
            state = await session.send_request(
                wire.GetTask(params=wire.TaskParams(taskId=task_id)), wire.GetTaskResult
            )
        return state.model_copy(update={"task_id": params.task_id, "meta": None})

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: FleetUpdateParams) -> wire.Ack:
        require_extension(ctx, "tasks/update")
        async with self._task(params.task_id) as (session, task_id):
            update = wire.UpdateParams(taskId=task_id, inputResponses=params.input_responses)
            await session.send_request(wire.UpdateTask(params=update), mcp_types.Result)
        return wire.Ack()

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: FleetTaskParams) -> wire.Ack:
        require_extension(ctx, "tasks/cancel")
        async with self._task(params.task_id) as (session, task_id):
            await session.send_request(
                wire.CancelTask(params=wire.TaskParams(taskId=task_id)), mcp_types.Result
            )
        return wire.Ack()

    @contextlib.asynccontextmanager
    async def _task(self, fleet_id: str) -> AsyncIterator[tuple[ClientSession, str]]:
        """A connection to the agent whose task `fleet_id` names, and the agent's own id of it.

        A task of an agent the caller may not invoke (or no longer in the fleet) is not found,
        as one of another caller is: the fleet says nothing about others' tasks.
        """
        name, _, task_id = fleet_id.partition(SEPARATOR)
        if not task_id or len(task_id) > AGENT_TASK_ID_MAX:
            raise _not_found(fleet_id)
        credential = _credential()
        if self._agents.endpoint(name) is None or await self._agents.admission(
            name, self._bearer(credential)
        ):
            raise _not_found(fleet_id)
        try:
            async with self._agent(name, credential) as session:
                yield session, task_id
        except MCPError as exc:
            if exc.error.code == mcp_types.INVALID_PARAMS and "no task" in exc.error.message:
                raise _not_found(fleet_id) from None
            raise
        except Exception as exc:  # noqa: BLE001 - the agent unreachable: said, not a crash
            raise MCPError(mcp_types.INTERNAL_ERROR, f"agent {name}: {exc}") from None

    @contextlib.asynccontextmanager
    async def _agent(self, name: str, credential: str | None) -> AsyncIterator[ClientSession]:
        """A 2026-07-28 connection to agent `name` with the caller's credential and the extension."""
        endpoint = self._agents.endpoint(name)
        if endpoint is None:
            raise MCPError(mcp_types.INVALID_PARAMS, f"agent {name} is no longer in the fleet")
        headers = {"Authorization": credential} if credential else {}
        transport = StreamableHttpTransport(endpoint, headers=headers)
        async with Client(transport, extensions=[_OptIn()], timeout=RELAY_TIMEOUT) as client:
            yield client.session


def _credential() -> str | None:
    """The caller's `Authorization` header, as sent (None: none)."""
    return get_http_headers(include={"authorization"}).get("authorization")


class _OptIn(ClientExtension):
    """Opts each request to the agent in to the tasks extension; a task comes back as its handle.

    The relay hands the handle on (`allow_claimed`) rather than following the task: the caller
    follows it through the fleet's `tasks/get`.
    """

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        """`resultType: "task"` on `tools/call`, at the 2026-07-28 revision."""
        return (
            ResultClaim(
                result_type="task", model=CreateTaskResult, resolve=_unresolved, protocol_versions=MODERN
            ),
        )


async def _unresolved(handle: CreateTaskResult, ctx: ClaimContext) -> mcp_types.CallToolResult:
    raise MCPError(mcp_types.INTERNAL_ERROR, "the fleet relays a task's handle; it does not follow the task")


def _fields(handle: CreateTaskResult) -> Mapping[str, Any]:
    """The task's fields; its `_meta` (the agent's serverInfo) is not the fleet's to repeat."""
    return handle.model_dump(by_alias=True, exclude_none=True, exclude={"meta"})
