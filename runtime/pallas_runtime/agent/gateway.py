"""Tools at scale: three gateway tools in front of an agent's downstream servers (docs/api.md §3).

An agent given a few real MCP servers with hundreds of tools would spend its context (and its
money) on schemas before the first word. With `toolExposure.mode: onDemand` (or `auto`, once the
schemas outgrow their allowance) the model is offered, instead of every allowed schema:

- `list_servers`: the servers and the names of the tools each lets this agent use;
- `get_server_tools`: the schemas of one server's tools, filtered by names or a wildcard
  pattern, within a token allowance (the answer says when it was cut short);
- `execute_tool`: one call of a server's tool, its result passed on untouched (every content
  type, `isError`), within an optional `timeout_ms`.

The tools' descriptions carry an index of server and tool names, so the model knows what exists
without a round trip. With `toolExposure.gateway` the agent's own MCP clients get the same three
tools. Every call goes through `ToolBox.call`: the same policy, audit line, metrics and error
codes as a direct call. Peer agents are always offered directly (their `send_message`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pallas_api.config import ToolExposure
from pallas_api.errors import ErrorCode
from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.agent.toolbox import OfferedTool
from pallas_runtime.agent.window import input_room, text_tokens
from pallas_runtime.messages import ToolSpec

LIST_SERVERS = "list_servers"
GET_SERVER_TOOLS = "get_server_tools"
EXECUTE_TOOL = "execute_tool"
GATEWAY_TOOLS = (LIST_SERVERS, GET_SERVER_TOOLS, EXECUTE_TOOL)

INDEX_SHARE = 4
"""The index of tool names in the descriptions takes at most 1/INDEX_SHARE of the schema allowance;
past that it lists each server with its number of tools (and `list_servers` has the names)."""


@dataclass(frozen=True, slots=True)
class ToolMenu:
    """What one turn offers its model, computed once at the turn's start.

    Every request of the turn carries the same tool list, so a provider's prompt cache is not
    broken mid-turn, and the model's calls are resolved against the same tools it was shown.
    """

    offered: dict[str, OfferedTool]
    """Every tool of every reachable source by its model-facing name, denied ones flagged."""
    on_demand: bool
    """The servers' tools go through the three gateway tools (peers are offered directly)."""
    schema_allowance: int
    """Tokens the tool schemas of one request may take (`toolExposure.schemaBudgetTokens`)."""
    specs: list[ToolSpec]
    """The tools the turn's requests carry."""


def schema_allowance(settings: ToolExposure, capabilities: ModelCapabilities, params: RequestParams) -> int:
    """Tokens the tool schemas of one request may take (`schemaBudgetTokens`, else 1/4 of input)."""
    return settings.schema_budget_tokens or max(1, input_room(capabilities, params) // 4)


def menu(
    offered: dict[str, OfferedTool],
    settings: ToolExposure,
    capabilities: ModelCapabilities,
    params: RequestParams,
    forced: str | None,
) -> ToolMenu:
    """The turn's tools: every allowed one, or the peers and the gateway tools, and the allowance.

    `auto` offers every schema while they fit the allowance and goes on demand once they do not.
    On demand, the tool `forced` names (the call's `toolChoice`, model-facing) is offered
    directly too, so it can be forced. `capabilities` and `params` are the turn's model's.
    """
    allowance = schema_allowance(settings, capabilities, params)
    if settings.mode == "auto":
        on_demand = schemas_of_servers(offered) > allowance
    else:
        on_demand = settings.mode == "onDemand"
    allowed = [(name, o) for name, o in offered.items() if o.allowed]
    if on_demand:
        allowed = [(name, o) for name, o in allowed if o.peer or name == forced]
    specs = [ToolSpec(name, o.tool.description, o.tool.input_schema) for name, o in allowed]
    if on_demand:
        specs.extend(gateway_specs(offered, allowance))
    return ToolMenu(offered, on_demand, allowance, specs)


class GatewayError(Exception):
    """A gateway call that cannot be answered; the text says why in the caller's words."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


def servers_tools(offered: Mapping[str, OfferedTool]) -> dict[str, list[OfferedTool]]:
    """The allowed tools of each downstream server (peers left out), in listing order."""
    by_server: dict[str, list[OfferedTool]] = {}
    for entry in offered.values():
        if entry.allowed and not entry.peer:
            by_server.setdefault(entry.source.name, []).append(entry)
    return by_server


def schemas_of_servers(offered: Mapping[str, OfferedTool]) -> int:
    """What every allowed server tool's schema would take in one request."""
    return sum(e.schema_tokens for tools in servers_tools(offered).values() for e in tools)


def list_servers(offered: Mapping[str, OfferedTool], configured: Sequence[str]) -> dict[str, Any]:
    """`list_servers`: every configured server, whether its tools could be listed, their names."""
    by_server = servers_tools(offered)
    listed = {e.source.name for e in offered.values() if not e.peer}
    servers = []
    for name in configured:
        tools = [e.tool.name for e in by_server.get(name, [])]
        entry: dict[str, Any] = {
            "name": name,
            "available": name in listed,
            "toolCount": len(tools),
            "tools": tools,
        }
        servers.append(entry)
    return {"servers": servers}


def server_tools(
    offered: Mapping[str, OfferedTool],
    configured: Sequence[str],
    server: str,
    *,
    names: Sequence[str] | None,
    pattern: str | None,
    max_schema_tokens: int | None,
    allowance: int,
) -> dict[str, Any]:
    """`get_server_tools`: the definitions of `server`'s allowed tools that match, within allowance.

    The allowance is the smaller of the caller's `max_schema_tokens` and the agent's schema allowance;
    tools are taken in the server's order until the next would not fit, and the answer says how
    many were left out (narrow the request with `names` or `pattern` to reach them).
    """
    tools = _server_entries(offered, configured, server)
    matching = [
        e
        for e in tools
        if (not names or e.tool.name in names) and (not pattern or fnmatch.fnmatchcase(e.tool.name, pattern))
    ]
    limit = min(max_schema_tokens, allowance) if max_schema_tokens else allowance
    chosen: list[dict[str, Any]] = []
    used = 0
    for entry in matching:
        cost = entry.schema_tokens
        if used + cost > limit:
            break
        used += cost
        chosen.append(
            {
                "name": entry.tool.name,
                "description": entry.tool.description,
                "inputSchema": entry.tool.input_schema,
            }
        )
    answer: dict[str, Any] = {
        "server": server,
        "tools": chosen,
        "totalAvailable": len(tools),
        "matched": len(matching),
        "returned": len(chosen),
        "schemaTokens": used,
        "truncated": len(chosen) < len(matching),
    }
    if answer["truncated"]:
        answer["note"] = (
            f"{len(matching) - len(chosen)} matching tools left out to stay within {limit} schema tokens: "
            "ask again with `names` or a narrower `pattern`"
        )
    missing = [n for n in names or () if n not in {e.tool.name for e in tools}]
    if missing:
        answer["unknown"] = missing
    return answer


def target(
    offered: Mapping[str, OfferedTool], configured: Sequence[str], server: str, tool: str
) -> OfferedTool:
    """The offered tool `execute_tool` names, allowed or not (the call itself enforces the policy).

    Raises:
        GatewayError: the server is not one of the agent's, its tools could not be listed, or it
            has no such tool.
    """
    _check_server(offered, configured, server)
    for entry in offered.values():
        if entry.source.name == server and entry.tool.name == tool and not entry.peer:
            return entry
    raise GatewayError(
        f"server {server!r} has no tool {tool!r} (list_servers names them)", ErrorCode.TOOL_NOT_FOUND
    )


def _check_server(offered: Mapping[str, OfferedTool], configured: Sequence[str], server: str) -> None:
    """Raise GatewayError unless `server` is one of the agent's and its tools could be listed."""
    if server not in configured:
        raise GatewayError(
            f"server {server!r} is not one of this agent's servers ({', '.join(configured) or 'none'})",
            ErrorCode.TOOL_NOT_FOUND,
        )
    if not any(e.source.name == server for e in offered.values()):
        raise GatewayError(f"server {server!r} could not list its tools now", ErrorCode.SERVER_UNAVAILABLE)


def _server_entries(
    offered: Mapping[str, OfferedTool], configured: Sequence[str], server: str
) -> list[OfferedTool]:
    _check_server(offered, configured, server)
    return servers_tools(offered).get(server, [])


def tool_index(offered: Mapping[str, OfferedTool], allowance: int) -> str:
    """Each server with its tools' names, or with their number when the names would not fit."""
    by_server = servers_tools(offered)
    named = "\n".join(f"- {s}: {', '.join(e.tool.name for e in tools)}" for s, tools in by_server.items())
    if text_tokens(named) <= allowance // INDEX_SHARE:
        return named
    return "\n".join(f"- {s}: {len(tools)} tools (list_servers names them)" for s, tools in by_server.items())


@dataclass(frozen=True, slots=True)
class GatewayArguments:
    """The arguments of a gateway call, checked."""

    server: str = ""
    tool: str = ""
    args: Mapping[str, Any] | None = None
    names: list[str] | None = None
    pattern: str | None = None
    max_schema_tokens: int | None = None
    timeout_ms: int | None = None


def parse_arguments(name: str, arguments: Mapping[str, Any]) -> GatewayArguments:
    """The arguments of a call to gateway tool `name`; INVALID_ARGUMENTS naming what is wrong."""

    def text(key: str, required: bool) -> str | None:
        value = arguments.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            raise GatewayError(f"`{key}` must be a non-empty string", ErrorCode.INVALID_ARGUMENTS)
        return value

    def positive(key: str) -> int | None:
        value = arguments.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise GatewayError(f"`{key}` must be a positive integer", ErrorCode.INVALID_ARGUMENTS)
        return value

    if name == LIST_SERVERS:
        return GatewayArguments()
    server = text("server", True) or ""
    if name == GET_SERVER_TOOLS:
        names = arguments.get("names")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            raise GatewayError("`names` must be a list of tool names", ErrorCode.INVALID_ARGUMENTS)
        return GatewayArguments(
            server=server,
            names=names,
            pattern=text("pattern", False),
            max_schema_tokens=positive("max_schema_tokens"),
        )
    args = arguments.get("args", {})
    if not isinstance(args, dict):
        raise GatewayError("`args` must be an object of the tool's arguments", ErrorCode.INVALID_ARGUMENTS)
    return GatewayArguments(
        server=server, tool=text("tool", True) or "", args=args, timeout_ms=positive("timeout_ms")
    )


def gateway_specs(offered: Mapping[str, OfferedTool], allowance: int) -> list[ToolSpec]:
    """The three tools as the model sees them, the index of names in `list_servers`' description."""
    index = tool_index(offered, allowance)
    return [
        ToolSpec(
            LIST_SERVERS,
            "List the MCP servers you can use and the names of their tools. Servers and tools now:\n"
            + (index or "(none)"),
            {"type": "object", "properties": {}, "additionalProperties": False},
        ),
        ToolSpec(
            GET_SERVER_TOOLS,
            "Get the definitions (description and input schema) of a server's tools before calling "
            "them with execute_tool. Ask for the tools you need by `names` or a wildcard `pattern` "
            "(e.g. `get_*`); the answer is cut to a token budget and says so.",
            {
                "type": "object",
                "properties": {
                    "server": {"type": "string", "description": "A server list_servers names."},
                    "names": {"type": "array", "items": {"type": "string"}, "description": "Tool names."},
                    "pattern": {"type": "string", "description": "A wildcard over tool names."},
                    "max_schema_tokens": {"type": "integer", "minimum": 1, "description": "Token budget."},
                },
                "required": ["server"],
                "additionalProperties": False,
            },
        ),
        ToolSpec(
            EXECUTE_TOOL,
            "Call one tool of one server with its arguments; the tool's own result comes back.",
            {
                "type": "object",
                "properties": {
                    "server": {"type": "string"},
                    "tool": {"type": "string"},
                    "args": {
                        "type": "object",
                        "description": "The tool's arguments, as its input schema says.",
                    },
                    "timeout_ms": {"type": "integer", "minimum": 1},
                },
                "required": ["server", "tool"],
                "additionalProperties": False,
            },
        ),
    ]
