"""The agent's MCP Server Card (SEP-2127 draft), built from its config alone."""

from __future__ import annotations

from typing import Any

from pallas_api import names
from pallas_api.config import AgentConfig, parse_config
from pallas_registry.agent_cards import server_card_url
from pallas_registry.catalogue import Entry
from pallas_runtime.server.server_card import card_mcp_url, server_card
from tests.support.registry import state

CAPS = {"tools": {"listChanged": True}}
K8S = {"audiences": ["x"]}
RESOURCE = "pallasagents.pallas.dev"
MCP = "http://harper.agents.svc.cluster.local:8000/mcp"


def _config(**extra: Any) -> AgentConfig:
    return parse_config(
        {"name": "harper", "model": "m", "provider": {"name": "p", "type": "openai"}, **extra}, "test"
    )


def test_the_card_names_the_endpoint_versions_capabilities_and_no_auth() -> None:
    card = server_card(_config(title="Harper", description="Answers questions."), MCP, CAPS)
    assert card["$schema"] == "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
    assert card["name"] == "local.cluster.svc.default/harper"
    assert (card["title"], card["description"], card["version"]) == ("Harper", "Answers questions.", "1.0.0")
    (remote,) = card["remotes"]
    assert remote["url"] == MCP
    assert remote["supportedProtocolVersions"][-2:] == ["2025-11-25", "2026-07-28"]
    assert remote["authentication"] == {"required": False, "schemes": []}
    assert card["capabilities"] == CAPS
    assert card["_meta"]["dev.pallas/agent"]["a2a"] == {
        "agentCard": "http://harper.agents.svc.cluster.local:8000/.well-known/agent-card.json",
        "url": "http://harper.agents.svc.cluster.local:8000/a2a",
    }


def test_kubernetes_auth_asks_for_a_bearer_and_no_a2a_leaves_it_out() -> None:
    config = _config(
        auth={
            "mode": "kubernetes",
            "namespace": "agents",
            "resource": MCP,
            "kubernetes": {"audiences": ["x"]},
        },
        a2a={"enabled": False},
    )
    card = server_card(config, MCP, CAPS)
    assert card["name"] == "local.cluster.svc.agents/harper"
    assert card["remotes"][0]["authentication"] == {"required": True, "schemes": ["bearer"]}
    assert card["_meta"]["dev.pallas/agent"] == {
        "auth": {
            "mode": "kubernetes",
            "audiences": ["x"],
            "verb": "invoke",
            "resource": "pallasagents.pallas.dev",
        }
    }


def test_the_card_names_the_published_url_else_the_one_it_was_read_at() -> None:
    read_at = "http://127.0.0.1:8001/mcp/server-card?x=1"
    assert card_mcp_url(_config(), read_at) == "http://127.0.0.1:8001/mcp"
    assert card_mcp_url(_config(a2a={"url": "https://h.example/agents/harper/a2a"}), read_at) == (
        "https://h.example/agents/harper/mcp"
    )
    public = {"mode": "kubernetes", "resource": "https://p.example/mcp"}
    assert card_mcp_url(_config(auth=public), read_at) == "https://p.example/mcp"


def test_the_card_name_is_the_registry_default_name_of_the_agent() -> None:
    entry = Entry.build(state("harper", url=MCP))
    assert entry.name == server_card(_config(auth={"mode": "none", "namespace": "agents"}), MCP, CAPS)["name"]
    assert server_card_url(entry) == names.server_card_url(MCP) == MCP + "/server-card"


def test_the_deployment_name_prefix_names_the_card_as_it_names_the_entry() -> None:
    config = _config(namePrefix="com.example.agents", auth={"mode": "none", "namespace": "agents"})
    entry = Entry.build(state("harper", url=MCP, name_prefix="com.example.agents"))
    assert server_card(config, MCP, CAPS)["name"] == entry.name == "com.example.agents/harper"
