"""What the fleet's read-only tools answer: the catalogue's facts, as `/v0.1/servers` has them.

`list_agents`, `get_agent_health` and `registry_health` read the same catalogue snapshot and the
same provider checks as the HTTP endpoints; nothing here talks to an agent. Errors are coded tool
errors (`INVALID_ARGUMENTS` for a bad filter, `NOT_FOUND` for an unknown agent, `SERVER_UNAVAILABLE`
before the first full list: an empty list then would tell the client there are no agents).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastmcp.tools import ToolResult

from pallas_api.errors import ErrorCode
from pallas_registry.builder import VENDOR_META
from pallas_registry.catalogue import Entry
from pallas_registry.providers import ProviderChecks
from pallas_registry.query import BadParameter, parse_query, select
from pallas_registry.schema import OFFICIAL_META
from pallas_registry.source import CatalogueSource
from pallas_runtime.server.tool_errors import CodedToolError

NOT_LOADED = "the catalogue is not loaded yet; retry shortly"

Visible = Callable[[Sequence[Entry]], Awaitable[list[Entry]]]
"""The entries whose agents the current request's caller may invoke (`FleetGate.visible`)."""


async def everyone(entries: Sequence[Entry]) -> list[Entry]:
    """Every entry: a view without access control (the facts served to any caller)."""
    return list(entries)


def agent_name(entry: Entry) -> str:
    """The agent's own name (`metadata.name`), which names its tool in the fleet."""
    return entry.key[1]


def agent_facts(entry: Entry) -> dict[str, Any]:
    """One agent as `list_agents` shows it: who it is, what it can do, whether it is up."""
    server = entry.document["server"]
    vendor = entry.document["_meta"][VENDOR_META]
    return {
        "name": agent_name(entry),
        "serverName": entry.name,
        "title": entry.title,
        "description": server.get("description", ""),
        "capabilities": vendor["capabilities"],
        "ready": entry.ready,
        "status": vendor["status"],
        "phase": vendor["phase"],
        "health": vendor["health"],
        "model": vendor["model"],
        "provider": vendor["provider"],
        "url": server["remotes"][0]["url"],
        "auth": vendor["auth"],
    }


class FleetFacts:
    """The read-only fleet tools over a catalogue source and its provider checks."""

    def __init__(self, source: CatalogueSource, checks: ProviderChecks, visible: Visible = everyone) -> None:
        """Answer from `source`'s catalogue and `checks`' last results.

        Only about the agents `visible` lets the caller see: an agent it may not invoke is, to
        it, not in the fleet.
        """
        self._source = source
        self._checks = checks
        self._visible = visible

    def _live(self) -> list[Entry]:
        if not self._source.ready:
            raise CodedToolError(NOT_LOADED, ErrorCode.SERVER_UNAVAILABLE)
        return [e for e in self._source.store.snapshot().entries if e.status != "deleted"]

    async def list_agents(
        self, capability: str | None = None, ready: bool = False, search: str | None = None
    ) -> ToolResult:
        """The agents matching every filter given, by server name, as one JSON text.

        Built here rather than left to fastmcp: it turns a returned list into a content block per
        item, so no match would be an answer with no content at all, where a client reading the
        text (every LLM) expects `[]`.
        """
        pairs = [("ready", "true" if ready else "false")]
        pairs += [(k, v) for k, v in (("capability", capability), ("search", search)) if v is not None]
        try:
            query = parse_query(pairs)
        except BadParameter as exc:
            raise CodedToolError(str(exc), ErrorCode.INVALID_ARGUMENTS) from None
        if not self._source.ready:
            raise CodedToolError(NOT_LOADED, ErrorCode.SERVER_UNAVAILABLE)
        matching = select(self._source.store.snapshot(), query)
        agents = [agent_facts(entry) for entry in await self._visible(matching)]
        return ToolResult(content=json.dumps(agents, separators=(",", ":")))

    async def get_agent_health(self, agent: str) -> dict[str, Any]:
        """Agent `agent`'s phase, readiness and last health report."""
        entry = next((e for e in await self._visible(self._live()) if agent_name(e) == agent), None)
        if entry is None:
            problem = f"no agent {agent!r} in the fleet; list_agents lists them"
            raise CodedToolError(problem, ErrorCode.NOT_FOUND)
        vendor = entry.document["_meta"][VENDOR_META]
        message = entry.document["_meta"][OFFICIAL_META].get("statusMessage", "")
        return {
            "name": agent,
            "ready": entry.ready,
            "status": vendor["status"],
            "phase": vendor["phase"],
            "statusMessage": message,
            "health": vendor["health"],
        }

    async def registry_health(self) -> dict[str, Any]:
        """The catalogue's state and the provider checks (`/healthz`'s body, and more)."""
        report = self._checks.health()
        entries = self._live() if self._source.ready else []
        return {
            **report,
            "catalogue": {
                "loaded": self._source.ready,
                "connected": self._source.connected,
                "agents": len(entries),
                "ready": sum(1 for e in entries if e.ready),
            },
        }
