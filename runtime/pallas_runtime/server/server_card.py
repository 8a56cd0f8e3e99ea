"""The agent's MCP Server Card at `<mcp-url>/server-card` (SEP-2127, a draft; docs/registry.md).

The card says, before any connection, where the agent's MCP endpoint is, which protocol
revisions it speaks (the handshake ones and the stateless 2026-07-28), what it offers (the
capabilities its `server/discover` answer gives) and what a caller must present. It is open,
like the A2A Agent Card and the registry's catalogue: it says how to call, never a secret nor
the instruction. `server_card` is pure; `ServerCardRoute` serves it with the MCP app.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from fastmcp import FastMCP
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import Response

from pallas_api import names
from pallas_api.config import AgentConfig

SCHEMA: Final = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
"""The `$schema` the SEP-2127 draft gives its cards."""
VENDOR_META: Final = "dev.pallas/agent"
"""The card's `_meta` key for what only Pallas says (the same key as the registry's entries)."""
PROTOCOL_VERSIONS: Final = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
"""Every revision the agent answers: the initialize handshake ones and the sessionless ones."""
CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET",
    "Access-Control-Allow-Headers": "Content-Type",
}
"""The draft's CORS headers: a browser client may read the card of any origin."""


def _auth(config: AgentConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The remote's `authentication` (the draft's) and Pallas's detail of it (as in server.json)."""
    auth = config.auth
    if auth.mode == "none":
        return {"required": False, "schemes": []}, {"mode": "none"}
    if auth.mode == "oidc" and auth.oidc is not None:
        detail: dict[str, Any] = {"mode": "oidc", "issuer": auth.oidc.issuer, "audience": auth.oidc.audience}
        return {"required": True, "schemes": ["bearer", "oauth2"]}, detail
    detail = {
        "mode": "kubernetes",
        "audiences": list(auth.kubernetes.audiences),
        "verb": "invoke",
        "resource": "pallasagents.pallas.dev",
    }
    return {"required": True, "schemes": ["bearer"]}, detail


def server_card(config: AgentConfig, mcp_url: str, capabilities: dict[str, Any]) -> dict[str, Any]:
    """The card of the agent whose MCP endpoint callers reach at `mcp_url`.

    `name`, `title`, `description` and `version` are the ones the registry's `server.json` entry
    gives: the deployment's `registry.namePrefix`, else the one derived from the namespace.
    """
    prefix = config.name_prefix or names.cluster_name_prefix(config.auth.namespace)
    authentication, auth_detail = _auth(config)
    card: dict[str, Any] = {
        "$schema": SCHEMA,
        "name": names.server_name(names.clean_name_prefix(prefix), config.name),
        "version": config.version,
        "title": config.display_title,
        "description": config.description or f"{config.display_title} (Pallas agent)",
        "remotes": [
            {
                "type": "streamable-http",
                "url": mcp_url,
                "supportedProtocolVersions": list(PROTOCOL_VERSIONS),
                "authentication": authentication,
            }
        ],
        "capabilities": capabilities,
    }
    vendor: dict[str, Any] = {"auth": auth_detail}
    if config.a2a.enabled:
        vendor["a2a"] = {"agentCard": names.agent_card_url(mcp_url), "url": names.a2a_url(mcp_url)}
    card["_meta"] = {VENDOR_META: vendor}
    return card


def card_mcp_url(config: AgentConfig, request_url: str) -> str:
    """The MCP URL a card names: the agent's published one, else the address it was read at."""
    if config.auth.resource:
        return config.auth.resource
    if config.a2a.url:
        return names.mcp_url_of_a2a(config.a2a.url)
    return request_url.split("?", 1)[0].removesuffix(names.SERVER_CARD_SUFFIX)


class ServerCardRoute:
    """Serves the card of the agent's config now (a live edit of its description shows at once)."""

    def __init__(self, config: Callable[[], AgentConfig]) -> None:
        self._config = config

    def add_to(self, mcp: FastMCP) -> None:
        """Serve the card at `/mcp/server-card`, outside inbound auth like the probe routes."""
        self._mcp = mcp
        mcp.custom_route("/mcp" + names.SERVER_CARD_SUFFIX, methods=["GET"])(self.card)

    async def card(self, request: Request) -> Response:
        """The card, in the draft's media type, with its CORS headers."""
        config = self._config()
        # The capabilities a 2026-07-28 client's `server/discover` gets, so the two never differ.
        capabilities = self._mcp._mcp_server.get_capabilities(protocol_version=MODERN_PROTOCOL_VERSIONS[-1])
        body = server_card(
            config,
            card_mcp_url(config, str(request.url)),
            capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
        headers = {**CORS, "Cache-Control": "public, max-age=60"}
        return Response(json.dumps(body), media_type=names.SERVER_CARD_MEDIA_TYPE, headers=headers)
