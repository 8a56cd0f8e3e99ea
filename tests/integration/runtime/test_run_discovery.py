"""Discovery by the standards under `pallas run -f`: each agent's MCP Server Card at
`<mcp-url>/server-card` (SEP-2127, a draft), the registry's MCP Catalog of every card at
`/.well-known/mcp/catalog.json`, and `server/discover` (MCP 2026-07-28) beside the legacy
handshake, each checked with fastmcp's Client in its own mode, and `server/discover` once more
over raw HTTP as another SDK would send it.

The conformance suite here (0.1.16) has no 2026-07-28 or discovery scenario yet, so none runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import yaml
from fastmcp import Client

from tests.integration.runtime.test_run_a2a import registry_up
from tests.integration.runtime.test_run_command import manifests, pallas_run, registry_listing
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI
from tests.support.mcp_peers import free_ports

CARD_TYPE = "application/mcp-server+json"
MODERN = "2026-07-28"


async def test_cards_catalog_and_both_protocol_eras(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai)))
    base = free_ports(3)
    async with pallas_run(path, base):
        await registry_up(base)
        urls = await registry_listing(base)
        async with httpx2.AsyncClient() as http:
            listing = (await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/server.json")).json()
            catalog_response = await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/catalog.json")
            cards = {}
            for name, url in urls.items():
                response = await http.get(url + "/server-card", headers={"Accept": CARD_TYPE})
                assert response.status_code == 200, response.text
                assert response.headers["content-type"] == CARD_TYPE
                assert response.headers["access-control-allow-origin"] == "*"
                cards[name] = response.json()
        eras: dict[str, Any] = {}
        for name, url in urls.items():
            async with Client(url, timeout=30) as modern:
                assert modern.protocol_version == MODERN
                assert modern.initialize_result is None  # negotiated by server/discover, no handshake
                eras[name] = {
                    "modern": modern.server_capabilities,
                    "info": modern.server_info,
                    "tools": {t.name for t in await modern.list_tools()},
                }
            async with Client(url, mode="legacy", timeout=30) as legacy:
                assert legacy.initialize_result is not None
                assert legacy.protocol_version != MODERN
                eras[name]["legacy_tools"] = {t.name for t in await legacy.list_tools()}

    servers = {e["server"]["name"].rsplit("/", 1)[1]: e["server"] for e in listing["servers"]}
    for name, card in cards.items():
        server = servers[name]
        # Consistent with the registry's server.json entry of the same agent.
        assert card["$schema"].endswith("/server-card.schema.json")
        for field in ("name", "title", "description", "version"):
            assert card[field] == server[field], field
        (remote,) = card["remotes"]
        assert remote["type"] == "streamable-http"
        assert remote["url"] == server["remotes"][0]["url"] == urls[name]
        assert MODERN in remote["supportedProtocolVersions"]
        assert "2025-11-25" in remote["supportedProtocolVersions"]
        assert remote["authentication"] == {"required": False, "schemes": []}
        assert card["_meta"]["dev.pallas/agent"]["auth"] == {"mode": "none"}
        # The card's capabilities are exactly what server/discover gave the modern client.
        discovered = eras[name]["modern"].model_dump(by_alias=True, mode="json", exclude_none=True)
        assert card["capabilities"] == discovered
        assert eras[name]["info"].version == card["version"]
        # Both eras are served side by side, with the same tools.
        assert "send_message" in eras[name]["tools"]
        assert eras[name]["tools"] == eras[name]["legacy_tools"]

    assert catalog_response.status_code == 200
    assert catalog_response.headers["access-control-allow-origin"] == "*"
    catalog = catalog_response.json()
    by_name = {s["name"].rsplit("/", 1)[1]: s for s in catalog["servers"]}
    assert sorted(by_name) == sorted(urls)
    for name, item in by_name.items():
        assert item["name"] == servers[name]["name"]
        assert item["serverCard"] == urls[name] + "/server-card"
        assert item["card"] == cards[name]


async def test_server_discover_over_raw_http_is_sessionless() -> None:
    """The 2026-07-28 wire as a client of another SDK sends it: one POST, no initialize before it,
    and no `Mcp-Session-Id` minted for it."""
    discover = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            }
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "server/discover",
    }
    async with (
        FakeOpenAI() as llm,
        serve_agent(agent_config(llm.base_url, name="harper", description="Answers.")) as agent,
        httpx2.AsyncClient(timeout=30) as http,
    ):
        response = await http.post(agent.url, json=discover, headers=headers)
        card = (await http.get(agent.url + "/server-card")).json()
    assert response.status_code == 200, response.text
    assert "mcp-session-id" not in response.headers
    body = (
        response.json()
        if response.headers["content-type"].startswith("application/json")
        else sse(response.text)
    )
    result = body["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["instructions"] == "Answers."
    assert result["capabilities"] == card["capabilities"]
    assert MODERN in card["remotes"][0]["supportedProtocolVersions"]


def sse(text: str) -> dict[str, Any]:
    """The JSON-RPC message of a one-event SSE answer."""
    data = [line.removeprefix("data:").strip() for line in text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))
