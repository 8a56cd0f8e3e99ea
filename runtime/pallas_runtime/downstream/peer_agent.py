"""Another Pallas agent (`spec.agents[]`) as a ToolSource offering only its `send_message` tool."""

from __future__ import annotations

import logging

import mcp_types

from pallas_api.config import PeerAgent
from pallas_runtime.downstream.remote import RemoteMcpSource
from pallas_runtime.downstream.source import RemoteTool

log = logging.getLogger("pallas.downstream")

SEND_MESSAGE = "send_message"


class PeerAgentSource(RemoteMcpSource):
    """A peer agent: the model sees its `send_message` tool as `<agent>__send_message`.

    Agents of one deployment share a trust boundary, so by default (`forwardInboundAuth: true`)
    the caller's bearer rides along, each such call on a session of its own.
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
        )
        self._warned_missing = False

    def _keep(self, tool: mcp_types.Tool) -> bool:
        return tool.name == SEND_MESSAGE

    async def list_tools(self) -> list[RemoteTool]:
        """The peer's `send_message` tool (an empty list, with one warning, if it has none)."""
        tools = await super().list_tools()
        if not tools and not self._warned_missing:
            self._warned_missing = True
            log.warning("%s: the peer agent offers no %s tool", self.name, SEND_MESSAGE)
        return tools
