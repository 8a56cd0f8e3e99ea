"""Tools at scale over real HTTP: a 500-tool server, server-everything and the gateway tools.

The agent thinks with the scripted fake OpenAI server (the real wire format through the SDK) and
acts through real MCP servers: in `onDemand` the first LLM request carries three small tools
instead of ~200k tokens of schemas, and the model still finds and calls a tool deep in the list.
"""

from __future__ import annotations

import json
from typing import Any

from pallas_api.config import AgentConfig
from pallas_runtime.agent.window import text_tokens
from tests.integration.runtime.test_agent_server import agent, client, config
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import EverythingServer
from tests.support.mcp_servers import error_server, image_server, wide_server

BUDGET = 20_000


def tool_tokens(request: Any) -> int:
    """What the request's tool definitions weigh, as the agent estimates tokens (bytes/3)."""
    return text_tokens(json.dumps(request.json.get("tools", [])))


def wide_config(llm: FakeOpenAI, url: str, mode: str) -> AgentConfig:
    return config(
        llm,
        servers=[{"name": "wide", "url": url, "timeoutSeconds": 10}],
        toolExposure={"mode": mode, "schemaBudgetTokens": BUDGET},
        capabilities={"contextWindow": 400_000, "maxOutputTokens": 8192},
    )


async def test_on_demand_finds_and_calls_a_tool_deep_in_500_within_the_budget(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        ToolCalls([Call("get_server_tools", {"server": "wide", "pattern": "op_47*"})]),
        ToolCalls([Call("execute_tool", {"server": "wide", "tool": "op_473", "args": {"field_0": "x"}})]),
        Text("op_473 done."),
    )
    async with (
        wide_server() as wide,
        agent(wide_config(fake_openai, wide.url, "onDemand")) as running,
        client(running.url) as mcp,
    ):
        result = await mcp.call_tool("send_message", {"message": "run operation 473 on x"})
    assert result.content[0].text == "op_473 done."
    first, second, third = fake_openai.completions
    assert [t["function"]["name"] for t in first.json["tools"]] == [
        "list_servers",
        "get_server_tools",
        "execute_tool",
    ]
    assert tool_tokens(first) < BUDGET
    assert "op_499" in first.json["tools"][0]["function"]["description"]  # the index names every tool
    schemas = json.loads(second.json["messages"][-1]["content"])
    assert [t["name"] for t in schemas["tools"]] == [f"op_47{i}" for i in range(10)]
    assert schemas["tools"][3]["inputSchema"]["required"] == ["field_0"]
    assert third.json["messages"][-1]["content"] == 'op_473 ran with {"field_0": "x"}'


async def test_all_and_auto_against_the_same_500_tools(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text("a"), Text("b"))
    async with wide_server() as wide:
        async with agent(wide_config(fake_openai, wide.url, "all")) as running, client(running.url) as mcp:
            await mcp.call_tool("send_message", {"message": "hi"})
        async with agent(wide_config(fake_openai, wide.url, "auto")) as running, client(running.url) as mcp:
            await mcp.call_tool("send_message", {"message": "hi"})
    every, auto = fake_openai.completions
    assert len(every.json["tools"]) == 500
    assert tool_tokens(every) > 150_000  # what onDemand saves
    assert [t["function"]["name"] for t in auto.json["tools"]] == [
        "list_servers",
        "get_server_tools",
        "execute_tool",
    ]


async def test_a_client_uses_the_agent_as_a_gateway_to_real_servers(
    fake_openai: FakeOpenAI, server_everything: EverythingServer
) -> None:
    async with image_server() as pictures, error_server() as failing:
        cfg = config(
            fake_openai,
            servers=[
                {"name": "everything", "url": server_everything.url},
                {"name": "pictures", "url": pictures.url},
                {"name": "failing", "url": failing.url},
            ],
            tools={"deny": ["everything__get-env"]},
            toolExposure={"gateway": True},
        )
        async with agent(cfg) as running, client(running.url) as mcp:
            listed = await mcp.call_tool("list_servers", {})
            tiny = await mcp.call_tool("execute_tool", {"server": "everything", "tool": "get-tiny-image"})
            picture = await mcp.call_tool("execute_tool", {"server": "pictures", "tool": "picture"})
            failed = await mcp.call_tool(
                "execute_tool",
                {"server": "failing", "tool": "fail", "args": {"message": "no"}},
                raise_on_error=False,
            )
            denied = await mcp.call_tool(
                "execute_tool", {"server": "everything", "tool": "get-env"}, raise_on_error=False
            )
    servers = {s["name"]: s for s in listed.structured_content["servers"]}
    assert "get-tiny-image" in servers["everything"]["tools"]
    assert "get-env" not in servers["everything"]["tools"]
    assert "image" in [c.type for c in tiny.content]
    text, image = picture.content
    assert (text.text, image.type, image.mime_type) == ("a pixel", "image", "image/png")
    assert failed.is_error
    assert failed.content[0].text == "no"
    assert denied.is_error
    assert denied.structured_content["error"]["code"] == "DENIED_BY_POLICY"
    assert not fake_openai.completions  # no model in between
