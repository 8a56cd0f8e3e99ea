"""Build an agent's tool sources from its config."""

from __future__ import annotations

from collections.abc import Mapping

from pallas_api.config import AgentConfig
from pallas_runtime.downstream.mcp_server import McpServerSource
from pallas_runtime.downstream.peer_agent import PeerAgentSource
from pallas_runtime.downstream.source import ToolSource


def build_sources(config: AgentConfig, environ: Mapping[str, str] | None = None) -> list[ToolSource]:
    """One source per downstream server, then one per peer agent, in config order.

    Args:
        config: The agent's config.
        environ: Where `valueFromEnv` headers are looked up; the process environment if None.

    Returns:
        Unconnected sources; close each with `aclose()` when the agent stops.
    """
    probe_timeout = config.health.probe_timeout_seconds
    sources: list[ToolSource] = [
        McpServerSource(server, probe_timeout=probe_timeout, environ=environ) for server in config.servers
    ]
    sources.extend(PeerAgentSource(peer, probe_timeout=probe_timeout) for peer in config.agents)
    return sources
