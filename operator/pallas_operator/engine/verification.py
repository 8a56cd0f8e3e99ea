"""MCP checks of a running agent for its status: verification and `get_health`.

Both go through the one MCP probe (`pallas_io.probe`) and never raise: a failure is
a result, reported in status, so a broken agent degrades and never crashes the operator.
Messages are cut short and carry nothing beyond what the agent chose to publish; the headers
(a probe token in `auth.mode: kubernetes`) are sent and never repeated.

With `auth.mode: oidc` the operator holds no token of the issuer, so it verifies what can be
verified without one (`verify_challenge`): the agent answers MCP `initialize` with the 401
challenge of the MCP authorization spec and its RFC 9728 metadata names the configured issuer.
`get_health` is not called then (`HealthNotCheckable`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pallas_api.status import ServerInfo
from pallas_io import probe
from pallas_operator.status import HealthResult, Verification

MAX_MESSAGE = 300
"""Longest message the operator writes into a status (a longer one is cut here)."""


async def verify(url: str, time_limit: float, headers: Mapping[str, str] | None = None) -> Verification:
    """Initialize an MCP session and list the tools (all pages)."""
    outcome = await probe.probe(url, time_limit=time_limit, list_tools=True, headers=headers)
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


async def check_health(url: str, time_limit: float, headers: Mapping[str, str] | None = None) -> HealthResult:
    """Call the agent's `get_health` tool."""
    outcome = await probe.probe(url, time_limit=time_limit, get_health=True, headers=headers)
    if not outcome.ok:
        return HealthResult(None, outcome.message[:MAX_MESSAGE])
    if outcome.health is None:
        return HealthResult(None, outcome.health_problem[:MAX_MESSAGE])
    report = outcome.health
    return HealthResult(
        report.status,
        (report.message or "")[:MAX_MESSAGE],
        busy=report.busy,
        config_hash=report.config_hash,
        missing_secrets=tuple(s[:MAX_MESSAGE] for s in (report.missing_secrets or ())[:20]),
        spend=report.spend,
    )


def _same_issuer(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


async def verify_challenge(url: str, time_limit: float, issuer: str) -> Verification:
    """Without a token: the agent asks for a bearer and its metadata names `issuer`."""
    outcome = await probe.probe(url, time_limit=time_limit)
    if outcome.ok:
        return _failed(url, "it answered without a token, but spec.auth.mode is oidc (an older config?)")
    if not outcome.unauthorized:
        return _failed(url, outcome.message)
    metadata = await probe.resource_metadata(url, time_limit=time_limit)
    if not metadata.ok:
        return _failed(url, metadata.message)
    if not any(_same_issuer(s, issuer) for s in metadata.authorization_servers):
        named = ", ".join(metadata.authorization_servers) or "none"
        return _failed(url, f"its protected-resource metadata names {named}, not the issuer {issuer}")
    message = f"asks for a bearer of {issuer} (oidc: the operator holds no token, so tools were not listed)"
    return Verification(ok=True, message=message[:MAX_MESSAGE], without_token=True)


def _failed(url: str, reason: str) -> Verification:
    return Verification(ok=False, message=f"MCP verification of {url} failed: {reason}"[:MAX_MESSAGE])
