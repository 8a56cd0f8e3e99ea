"""The fleet as one MCP server: the registry serves its agents as tools at `/mcp` (docs/api.md §4.1).

A client that adds the registry's `/mcp` reaches every agent of the catalogue without reading the
HTTP catalogue or connecting to each agent:

- `list_agents(capability, ready, search)`: the catalogue's facts about each agent, filtered as
  `/v0.1/servers` filters (`query.parse_query`, the same rules and errors).
- `get_agent_health(agent)`: one agent's phase, readiness and last health report.
- `registry_health()`: whether the catalogue is loaded and current, and the provider checks.
- `<agent>` for every agent listed (deleted ones aside): sends `message` to that agent's
  `send_message` at the address the registry itself reaches it (`Entry.endpoint`: cluster DNS,
  the loopback URL under `pallas run`), with the caller's `Authorization`. The relay is the one a
  calling agent uses for its peers (`downstream.peer_agent.PeerAgentSource`): the agent's progress
  notifications come back as this call's progress, its approval questions go to this call's
  client (elicitation), its result comes back as it was given (coded errors included), and a
  cancelled call closes the agent's request.

Access (`fleet_access`): while any agent checks its callers, the endpoint needs a bearer those
agents accept (401 otherwise), and a caller sees in `tools/list`, `list_agents` and
`get_agent_health` only the agents it may `invoke` by their own rules; calling another's tool is
a `DENIED_BY_POLICY` error result. The caller's credential is what the relay forwards, so the
agent checks it again itself.

The agent tools follow the catalogue: they are brought in line before every `tools/list` and
`tools/call`, and a watcher does the same every `watch_interval` seconds and sends
`notifications/tools/list_changed` to every session that listed tools when the set changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from fastmcp import Context, FastMCP
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools import Tool, ToolResult
from mcp.server.session import ServerSession
from mcp_types import ListToolsRequest, ToolAnnotations
from starlette.types import ASGIApp

from pallas_api.config import PeerAgent
from pallas_api.errors import ErrorCode
from pallas_registry.catalogue import Entry
from pallas_registry.fleet_access import FleetDoor, FleetGate, bearer
from pallas_registry.fleet_facts import FleetFacts, agent_name
from pallas_registry.fleet_tasks import FleetTasks
from pallas_registry.providers import ProviderChecks
from pallas_registry.source import CatalogueSource
from pallas_runtime.approval.elicit import caller_approver
from pallas_runtime.approval.question import NO_CHANNEL
from pallas_runtime.auth.identity import AuthUnavailable
from pallas_runtime.conversations.caller import one_turn_key, peer_conversation_id
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.content import outcome_blocks
from pallas_runtime.downstream.peer_agent import SEND_MESSAGE, PeerAgentSource
from pallas_runtime.downstream.source import DownstreamError, Onward
from pallas_runtime.edge.request_ids import SESSION_HEADER
from pallas_runtime.server.tool_errors import CodedErrors, error_result

log = logging.getLogger("pallas.registry.fleet")

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
FIXED_TOOLS = frozenset({"list_agents", "get_agent_health", "registry_health"})
PROBE_TIMEOUT = 5.0
FLEET = "fleet"
"""The calling agent's name the agents' peer conversation ids carry for fleet callers."""
INSTRUCTIONS = (
    "The agents of a Pallas deployment. Call an agent's tool (named after the agent) with a "
    "message to talk to it; list_agents finds agents by capability, readiness or text, "
    "get_agent_health and registry_health say what is up."
)


def fleet_conversation(credential: str | None, session: str | None) -> ConversationKey:
    """The conversation a fleet caller's messages to an agent continue.

    The registry is the agent's caller here, on connections it shares among its own callers, so
    the agent alone cannot tell them apart. Each fleet session (handshake era) is a conversation
    of its own with each agent; a sessionless request keeps none (`once-`: the agent keeps
    nothing). The owner is a digest of the caller's credential (the agent checks the credential
    itself; the digest only keeps two callers of one session id apart), never the credential.
    """
    owner = hashlib.sha256((credential or "").encode()).hexdigest()[:32]
    if session is None:
        return one_turn_key(FLEET, owner)
    return ConversationKey(FLEET, owner, f"fleet-session-{session}")


def _caller_token() -> str | None:
    """The bearer of the current request (None: none sent)."""
    return bearer(get_http_headers(include={"authorization"}).get("authorization"))


def _wants_progress(ctx: Context) -> bool:
    """The caller sent a progress token: the agent is then asked to stream (else it is not)."""
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    return isinstance(meta, Mapping) and meta.get("progressToken") is not None


class _Subscribers(Middleware):
    """Brings the agent tools in line before a request, and remembers sessions that listed tools."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    async def on_list_tools(
        self, context: MiddlewareContext[ListToolsRequest], call_next: CallNext[ListToolsRequest, Any]
    ) -> Any:
        await self._fleet.sync()
        ctx = context.fastmcp_context
        if ctx is not None:
            with contextlib.suppress(RuntimeError):  # no session: nothing to notify later
                self._fleet.subscribe(ctx.session)
        tools = await call_next(context)
        shown = await self._fleet.visible_tools()
        return [tool for tool in tools if tool.name in FIXED_TOOLS or tool.name in shown]

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        await self._fleet.sync()
        return await call_next(context)


class Fleet:
    """The fleet MCP server over a catalogue source; `mcp` is its FastMCP instance."""

    def __init__(
        self,
        source: CatalogueSource,
        checks: ProviderChecks,
        *,
        watch_interval: float = 0.5,
        kubernetes_config: Any = None,
    ) -> None:
        """Serve the agents of `source`; `checks` are the provider checks `registry_health` reports.

        `kubernetes_config` (a lightkube `KubeConfig`) is what asks the API server about callers of
        `kubernetes`-mode agents; default: the pod's ServiceAccount, else the kubeconfig.
        """
        self.gate = FleetGate(kubernetes_config=kubernetes_config)
        self._facts = FleetFacts(source, checks, self._visible)
        self._source = source
        self._watch_interval = watch_interval
        self._peers: dict[str, PeerAgentSource] = {}
        self._offered: dict[str, tuple[str, str]] = {}
        """Agent tool name → (description, endpoint) as offered now."""
        self._synced_version = -1
        self._subscribers: dict[object, ServerSession] = {}
        """The sessions told of tool list changes, by MCP connection (a session object is per request)."""
        self._lock = asyncio.Lock()
        self.mcp = FastMCP(
            "pallas-fleet",
            instructions=INSTRUCTIONS,
            middleware=[_Subscribers(self), CodedErrors()],
            mask_error_details=True,
        )
        self.mcp.add_extension(FleetTasks(self, bearer))
        facts = self._facts
        for function, description in (
            (facts.list_agents, "The agents of the fleet: name, title, description, capabilities, "
             "readiness, phase, model and health. Filters: capability (a tag), ready (only ready "
             "agents), search (part of the name or title)."),
            (facts.get_agent_health, "One agent's phase, readiness and last health report."),
            (facts.registry_health, "The registry's own health: catalogue loaded and current, "
             "agents by readiness, and the LLM provider checks."),
        ):  # fmt: skip
            self.mcp.add_tool(
                Tool.from_function(
                    function,
                    description=description,
                    output_schema=None,
                    annotations=READ_ONLY,
                )
            )

    def door(self, app: ASGIApp) -> ASGIApp:
        """`app` (this fleet's HTTP app) behind the fleet's own authentication (`FleetDoor`)."""
        return FleetDoor(app, self.gate, lambda: self._source.store.snapshot().entries)

    async def _visible(self, entries: Sequence[Entry]) -> list[Entry]:
        """The `entries` whose agents the current request's caller may invoke."""
        return await self.gate.visible(_caller_token(), entries)

    async def visible_tools(self) -> set[str]:
        """The agent tools the current request's caller may call (by the agents' access rules)."""
        live = [e for e in self._source.store.snapshot().entries if e.status != "deleted"]
        return {agent_name(entry) for entry in await self._visible(live)}

    def subscribe(self, session: ServerSession) -> None:
        """Notify `session`'s connection of changes to the tool list from now on, while it lasts.

        A sessionless (2026-07-28) request has no connection to tell later: it is not kept.
        """
        connection = getattr(session, "_connection", None)
        if connection is None or connection in self._subscribers:
            return
        self._subscribers[connection] = session

        async def ended() -> None:
            self._subscribers.pop(connection, None)

        connection.exit_stack.push_async_callback(ended)

    async def sync(self) -> bool:
        """Offer one tool per agent of the catalogue now; whether the tool list changed (then say so)."""
        catalogue = self._source.store.snapshot()
        if catalogue.version == self._synced_version:
            return False
        async with self._lock:
            if catalogue.version == self._synced_version:
                return False
            wanted = {
                agent_name(entry): (entry.document["server"].get("description", ""), entry.endpoint)
                for entry in catalogue.entries
                if entry.status != "deleted" and agent_name(entry) not in FIXED_TOOLS
            }
            changed = wanted != self._offered
            for name in [n for n in self._offered if wanted.get(n) != self._offered[n]]:
                self.mcp.local_provider.remove_tool(name)
                # A new description keeps the connection (calls may be in flight on it); an agent
                # gone or moved closes it.
                if name not in wanted or wanted[name][1] != self._offered[name][1]:
                    peer = self._peers.pop(name, None)
                    if peer is not None:
                        await peer.aclose()
            for name, (description, _) in wanted.items():
                if self._offered.get(name) != wanted[name]:
                    self.mcp.add_tool(self._agent_tool(name, description))
            self._offered = wanted
            self._synced_version = catalogue.version
        if changed:
            await self._notify(list(self._subscribers.values()))
        return changed

    def _agent_tool(self, name: str, description: str) -> Tool:
        async def relay(message: str, ctx: Context) -> ToolResult:
            return await self._relay(name, message, ctx)

        return Tool.from_function(relay, name=name, description=description or name, output_schema=None)

    def _peer(self, name: str) -> PeerAgentSource:
        peer = self._peers.get(name)
        if peer is None:
            endpoint = self._offered[name][1]
            peer = PeerAgentSource(PeerAgent(name=name, url=endpoint), probe_timeout=PROBE_TIMEOUT)
            self._peers[name] = peer
        return peer

    async def _relay(self, name: str, message: str, ctx: Context) -> ToolResult:
        if name not in self._offered:
            return error_result(ErrorCode.NOT_FOUND, f"agent {name} is no longer in the fleet")
        headers = get_http_headers(include={"authorization", SESSION_HEADER})
        credential = headers.get("authorization")
        if (refusal := await self.admission(name, bearer(credential))) is not None:
            return refusal
        onward = Onward(
            credential=credential,
            on_progress=ctx.report_progress if _wants_progress(ctx) else None,
            conversation=fleet_conversation(credential, headers.get(SESSION_HEADER)),
            approver=caller_approver(ctx) or NO_CHANNEL,
        )
        try:
            outcome = await self._peer(name).call_tool(SEND_MESSAGE, {"message": message}, onward)
        except DownstreamError as exc:
            return error_result(exc.code, str(exc))
        return ToolResult(
            content=outcome_blocks(outcome), structured_content=outcome.structured, is_error=outcome.is_error
        )

    def endpoint(self, name: str) -> str | None:
        """The MCP URL of agent `name` as its tool is offered now; None: no such tool."""
        offered = self._offered.get(name)
        return None if offered is None else offered[1]

    def conversation_id(self, name: str, credential: str | None) -> str:
        """The `conversation_id` a sessionless call to agent `name` passes on: one turn's (kept nowhere)."""
        return peer_conversation_id(fleet_conversation(credential, None), name)

    async def admission(self, name: str, token: str | None) -> ToolResult | None:
        """None when the caller may invoke agent `name`, else the error result saying why not."""
        live = (e for e in self._source.store.snapshot().entries if e.status != "deleted")
        entry = next((e for e in live if agent_name(e) == name), None)
        if entry is None:
            return error_result(ErrorCode.NOT_FOUND, f"agent {name} is no longer in the fleet")
        try:
            allowed = await self.gate.may_invoke(token, entry)
        except AuthUnavailable as exc:
            return error_result(ErrorCode.SERVER_UNAVAILABLE, f"agent {name}: {exc}")
        if allowed:
            return None
        namespace = entry.key[0]
        rules = {
            "kubernetes": f"RBAC verb invoke on pallasagents/{name} in namespace {namespace}, "
            "and its spec.access lists",
            "oidc": "its spec.access lists (subjects, groups)",
        }.get(entry.auth.mode, "its access rules")
        why = "no credential was sent" if token is None else f"{rules} do not admit this caller"
        return error_result(ErrorCode.DENIED_BY_POLICY, f"you may not invoke agent {name}: {why}")

    async def _notify(self, sessions: Sequence[ServerSession]) -> None:
        for session in sessions:
            try:
                await session.send_tool_list_changed()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError) as exc:
                # Its connection is going: its exit callback forgets it.
                log.debug("fleet: could not notify a session: %s", exc)

    async def watch(self) -> None:
        """Keep the agent tools in line with the catalogue and tell subscribers; until cancelled."""
        while True:
            await self.sync()
            await asyncio.sleep(self._watch_interval)

    async def aclose(self) -> None:
        """Close the connections to the agents and the access checks'."""
        peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            await peer.aclose()
        await self.gate.aclose()
