"""The `get_health` tool: the agent's health report as one JSON text (docs/api.md §3).

The report is the `HealthChecker`'s (`agent/health.py`): downstream probes and the provider's
last check; it never calls the model.
"""

from __future__ import annotations

from fastmcp import FastMCP
from fastmcp.tools import Tool
from mcp_types import ToolAnnotations

from pallas_runtime.agent.health import HealthChecker
from pallas_runtime.server.descriptions import GET_HEALTH_DESCRIPTION


class HealthTool:
    """The tool over the agent's health checker."""

    def __init__(self, health: HealthChecker) -> None:
        self._health = health

    def add_to(self, mcp: FastMCP) -> None:
        """Offer the tool as `get_health`."""
        mcp.add_tool(
            Tool.from_function(
                self.get_health,
                name="get_health",
                description=GET_HEALTH_DESCRIPTION,
                output_schema=None,
                annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True),
            )
        )

    async def get_health(self, diagnostics: bool = False) -> str:
        """The report, as JSON.

        Args:
            diagnostics: Also report the config's reloads, each server's probe and the tool policy.
        """
        return (await self._health.report(diagnostics=diagnostics)).to_json()
