"""Another Pallas agent (`spec.agents[]`) as a ToolSource offering only its `send_message` tool."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import mcp_types

from pallas_api.config import PeerAgent
from pallas_runtime.approval.elicit import Relays
from pallas_runtime.conversations.caller import peer_conversation_id
from pallas_runtime.downstream.remote import RemoteMcpSource
from pallas_runtime.downstream.source import Onward, RemoteTool, ToolOutcome
from pallas_runtime.spending import guard as spending

log = logging.getLogger("pallas.downstream")

SEND_MESSAGE = "send_message"
LEFT_TO_THE_CALLER = frozenset({"conversation_id", "params"})
"""Arguments of a peer's send_message the model does not see or set: the conversation follows
from the calling turn, and the peer's sampling parameters are the peer's own."""


class PeerAgentSource(RemoteMcpSource):
    """A peer agent: the model sees its `send_message` tool as `<agent>__send_message`.

    Agents of one deployment share a trust boundary, so by default (`forwardInboundAuth: true`)
    the caller's bearer rides along, each such call on a session of its own. The conversation is
    not the model's to choose: `conversation_id` is left out of the schema it sees and set on
    every call, derived from the calling turn's conversation (see `conversations.caller`), and
    so are the peer's per-call `params`. Each call carries the calling turn's path of agents
    (`downstream.call_path`) and a relay token: the peer's approval questions come back with it
    and go on to the calling turn's own caller (`approval.elicit`).
    """

    def __init__(self, peer: PeerAgent, *, probe_timeout: float) -> None:
        """Build the source; nothing connects until first use.

        Args:
            peer: The peer agent's config.
            probe_timeout: The health probe's budget in seconds (`health.probeTimeoutSeconds`).
        """
        super().__init__(
            name=peer.name,
            url=peer.url,
            transport="streamable-http",
            timeout=peer.timeout_seconds,
            probe_timeout=probe_timeout,
            headers={},
            forward_inbound_auth=peer.forward_inbound_auth,
            max_result_bytes=peer.max_result_bytes,
        )
        self._warned_missing = False
        self._relays = Relays(peer.name)
        self._elicitation = self._relays.callback

    async def call_tool(self, tool: str, arguments: dict[str, Any], onward: Onward) -> ToolOutcome:
        """The call, with the peer's approval questions relayed to this turn's approver meanwhile.

        It holds what it passes on of the turn's budget until it returns (`spending.peer_grant`).
        """
        with self._relays.open(onward.approver) as relay:
            async with spending.peer_grant(onward.budget) as grant:
                held = replace(onward, relay=relay, grant=grant)
                return await super().call_tool(tool, arguments, held)

    async def _answered(self, result: mcp_types.CallToolResult, onward: Onward) -> None:
        """Charge what the peer's turn says it spent to the calling turn's caller."""
        await spending.peer_answered(onward.budget, result.meta)

    def _keep(self, tool: mcp_types.Tool) -> bool:
        return tool.name == SEND_MESSAGE

    async def list_tools(self, *, inbound_auth: str | None = None) -> list[RemoteTool]:
        """The peer's `send_message` tool (an empty list, with one warning, if it has none)."""
        tools = [_without_conversation_id(t) for t in await super().list_tools(inbound_auth=inbound_auth)]
        if not tools and not self._warned_missing:
            self._warned_missing = True
            log.warning("%s: the peer agent offers no %s tool", self.name, SEND_MESSAGE)
        return tools

    def _outgoing(
        self, arguments: dict[str, Any], onward: Onward
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """`send_message` in the peer conversation of the calling turn, with what the turn hands on.

        A call that would loop back or make the chain longer than `maxDepth` is refused here
        (CallRefused), unsent; the caller gets it as an error result with its code.
        """
        arguments = {k: v for k, v in arguments.items() if k not in LEFT_TO_THE_CALLER}
        if onward.conversation is not None:
            arguments["conversation_id"] = peer_conversation_id(onward.conversation, self.name)
        return arguments, onward.meta(self.name)


def _without_conversation_id(tool: RemoteTool) -> RemoteTool:
    schema = dict(tool.input_schema)
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k not in LEFT_TO_THE_CALLER}
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in LEFT_TO_THE_CALLER]
    return RemoteTool(tool.source, tool.name, tool.description, schema)
