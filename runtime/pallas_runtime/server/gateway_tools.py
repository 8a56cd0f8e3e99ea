"""`list_servers`, `get_server_tools` and `execute_tool` for the agent's own MCP clients.

With `toolExposure.gateway` a client (Daedalus, another agent) can use the agent as a
policy-enforcing gateway to its downstream servers, without a model in between: the same
three tools the model gets on demand (`agent/gateway.py`), under the agent's inbound access
control, its tool policy, audit lines, metrics and error codes. `execute_tool` answers with the
downstream result as the server gave it (seed 003: tool responses are not modified): its images,
audio, embedded resources and resource links, its `structuredContent` and its `isError`. Only its
text blocks are what the model would read too, scrubbed of the agent's secrets and cut to
`limits.maxToolResultBytes`: secrets stay in the agent whoever asks. A refusal is a coded error
result.
"""

from __future__ import annotations

from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.tools import Tool, ToolResult
from mcp_types import ToolAnnotations

from pallas_api.errors import ErrorCode
from pallas_runtime.agent import gateway
from pallas_runtime.agent.live import LiveAgent
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.turn import Turn
from pallas_runtime.approval.elicit import caller_approver
from pallas_runtime.approval.question import NO_CHANNEL
from pallas_runtime.conversations.caller import current_caller
from pallas_runtime.conversations.scope import conversation_key
from pallas_runtime.downstream.call_path import CallPath, CallRefused
from pallas_runtime.downstream.content import outcome_blocks
from pallas_runtime.edge.credential import forwarded_credential
from pallas_runtime.inflight import InFlight
from pallas_runtime.messages import TextPart
from pallas_runtime.server.request import progress_sender, request_meta, session_id
from pallas_runtime.server.tool_errors import CodedToolError, error_result

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True)


class GatewayTools:
    """The three gateway tools over the `ToolBox` of the agent's current generation.

    Each call holds the generation it started with (`LiveAgent.hold`), as a turn does: a config
    edit applied meanwhile takes effect from the next call.
    """

    def __init__(self, live: LiveAgent, inflight: InFlight, *, verified: bool) -> None:
        self._live = live
        self._inflight = inflight
        self._verified = verified

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the tools, with the descriptions the model gets (without the index of names)."""
        described = {spec.name: spec.description.split("\n", 1)[0] for spec in gateway.gateway_specs({}, 1)}
        mcp.add_tool(
            Tool.from_function(
                self.list_servers, name=gateway.LIST_SERVERS, description=described[gateway.LIST_SERVERS],
                annotations=READ_ONLY,
            )
        )  # fmt: skip
        mcp.add_tool(
            Tool.from_function(
                self.get_server_tools, name=gateway.GET_SERVER_TOOLS,
                description=described[gateway.GET_SERVER_TOOLS], annotations=READ_ONLY,
            )
        )  # fmt: skip
        mcp.add_tool(
            Tool.from_function(
                self.execute_tool, name=gateway.EXECUTE_TOOL, description=described[gateway.EXECUTE_TOOL],
                output_schema=None,
            )
        )  # fmt: skip

    async def list_servers(self) -> dict[str, Any]:
        """The servers and the names of the tools this agent may use on each."""
        with self._live.hold() as generation:
            loop = generation.loop
            offered = await loop.offered_tools(forwarded_credential(verified=self._verified))
            return gateway.list_servers(offered, loop.tools.server_names)

    async def get_server_tools(
        self,
        server: str,
        names: list[str] | None = None,
        pattern: str | None = None,
        max_schema_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Definitions of one server's tools, filtered, within the agent's schema allowance."""
        limit = max_schema_tokens if max_schema_tokens and max_schema_tokens > 0 else None
        with self._live.hold() as generation:
            loop = generation.loop
            offered = await loop.offered_tools(forwarded_credential(verified=self._verified))
            config = generation.config
            exposure, capabilities, params = config.tool_exposure, config.capabilities, config.request_params
            allowance = gateway.schema_allowance(exposure, capabilities, params)
            try:
                return gateway.server_tools(
                    offered, loop.tools.server_names, server, names=names, pattern=pattern,
                    max_schema_tokens=limit,
                    allowance=allowance,
                )  # fmt: skip
            except gateway.GatewayError as exc:
                raise CodedToolError(str(exc), exc.code) from None

    async def execute_tool(
        self,
        server: str,
        tool: str,
        ctx: Context,
        args: dict[str, Any] | None = None,
        timeout_ms: int | None = None,
    ) -> ToolResult:
        """Call one tool of one server; its result comes back as the server gave it."""
        with self._live.hold() as generation:
            config, loop = generation.config, generation.loop
            try:
                call_path = CallPath.inbound(request_meta(ctx), config.name, config.max_depth)
            except CallRefused as exc:
                raise CodedToolError(str(exc), exc.code) from None
            if timeout_ms is not None and timeout_ms <= 0:
                raise CodedToolError("`timeout_ms` must be a positive integer", ErrorCode.INVALID_ARGUMENTS)
            inbound_auth = forwarded_credential(verified=self._verified)
            offered = await loop.offered_tools(inbound_auth)
            try:
                entry = gateway.target(offered, loop.tools.server_names, server, tool)
            except gateway.GatewayError as exc:
                return error_result(exc.code, str(exc))
            # A stateful server keeps one session per conversation; a gateway client's conversation
            # is its MCP session, so its calls of one session share the server's state.
            caller = current_caller()
            turn = Turn(
                caller=caller,
                credential=inbound_auth,
                progress=ProgressReporter(config.name, progress_sender(ctx)),
                conversation=conversation_key(config.identity, "session", caller, None, session_id()),
                call_path=call_path,
                approver=caller_approver(ctx) or NO_CHANNEL,
            )
            limit = timeout_ms / 1000 if timeout_ms else None
            with self._inflight.track():
                outcome = await loop.tools.call(entry, args or {}, turn, time_limit=limit)
        if outcome.is_error and outcome.code is not None and len(outcome.content) == 1:
            first = outcome.content[0]
            return error_result(outcome.code, first.text if isinstance(first, TextPart) else "")
        return ToolResult(
            content=outcome_blocks(outcome), structured_content=outcome.structured, is_error=outcome.is_error
        )
