"""MCP checks of a running agent for its status: verification and `get_health`.

Both go through the contract's one MCP probe (`pallas_api.probe`) and never raise: a failure is
a result, reported in status, so a broken agent degrades and never crashes the operator.
Messages are cut short and carry nothing beyond what the agent chose to publish.
"""

from __future__ import annotations

from pallas_api import probe
from pallas_api.status import ServerInfo
from pallas_operator.status import HealthResult, Verification

MAX_MESSAGE = 300


async def verify(url: str, budget: float) -> Verification:
    """Initialize an MCP session and list the tools (all pages)."""
    outcome = await probe.probe(url, budget=budget, list_tools=True)
    if not outcome.ok or outcome.server is None:
        return Verification(
            ok=False, message=f"MCP verification of {url} failed: {outcome.message}"[:MAX_MESSAGE]
        )
    server = outcome.server
    return Verification(
        ok=True,
        server_info=ServerInfo(
            name=server.name, version=server.version, protocol_version=server.protocol_version
        ),
        tools=outcome.tools,
    )


async def check_health(url: str, budget: float) -> HealthResult:
    """Call the agent's `get_health` tool."""
    outcome = await probe.probe(url, budget=budget, get_health=True)
    if not outcome.ok:
        return HealthResult(None, outcome.message[:MAX_MESSAGE])
    if outcome.health is None:
        return HealthResult(None, outcome.health_problem[:MAX_MESSAGE])
    return HealthResult(outcome.health.status, (outcome.health.message or "")[:MAX_MESSAGE])
