"""The fleet MCP server in memory: its read-only tools and agent tools over a MemorySource."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError

from pallas_registry import CatalogueSource, MemorySource
from pallas_registry.fleet import Fleet
from pallas_registry.providers import ProviderChecks
from tests.support.registry import state


class Unlisted(CatalogueSource):
    """A source whose first full list never comes."""

    async def run(self) -> None:
        await asyncio.Event().wait()


def fleet(source: MemorySource) -> Fleet:
    return Fleet(source, ProviderChecks(list))


async def listed(client: Client[Any], **filters: Any) -> list[str]:
    result = await client.call_tool("list_agents", filters)
    return [agent["name"] for agent in json.loads(result.content[0].text)]


async def test_list_agents_filters_as_the_http_catalogue_does() -> None:
    source = MemorySource(
        [state("research"), state("writer", tags=("prose",), ready=False, phase="Pending", title="Writer")]
    )
    async with Client(fleet(source).mcp) as client:
        assert await listed(client) == ["research", "writer"]
        assert await listed(client, ready=True) == ["research"]
        assert await listed(client, capability="prose") == ["writer"]
        assert await listed(client, search="WRIT") == ["writer"]
        assert await listed(client, search="nobody") == []  # `[]` as text, not an empty answer
        with pytest.raises(ToolError, match="capability"):
            await listed(client, capability="not a tag!")


async def test_agent_tools_follow_the_catalogue() -> None:
    source = MemorySource([state("research")])
    async with Client(fleet(source).mcp) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
        assert set(tools) == {"list_agents", "get_agent_health", "registry_health", "research"}
        assert tools["research"].description == "Web search via Argos and knowledge graph via Neo4j"
        source.store.upsert(state("writer", description="Writes"))
        source.store.remove(("agents", "research"))
        tools = {tool.name: tool for tool in await client.list_tools()}
        assert set(tools) == {"list_agents", "get_agent_health", "registry_health", "writer"}
        with pytest.raises(ToolError, match="no agent 'research'"):
            await client.call_tool("get_agent_health", {"agent": "research"})


async def test_before_the_first_list_the_fleet_says_it_is_not_loaded() -> None:
    async with Client(Fleet(Unlisted(), ProviderChecks(list)).mcp) as client:
        with pytest.raises(ToolError, match="not loaded yet"):
            await client.call_tool("list_agents", {})
        health = json.loads((await client.call_tool("registry_health", {})).content[0].text)
        assert health["catalogue"]["loaded"] is False
