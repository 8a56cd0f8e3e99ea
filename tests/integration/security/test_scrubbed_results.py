"""Secrets an agent holds never come back to it through a tool: echoed values are scrubbed.

The attack (or accident): a downstream MCP server echoes the request headers it received, in its
result and in its progress messages. Those headers carry the agent's own secrets: the value of
a header configured from a Secret, and here also the provider's API key (one gateway key used
for the model and the tools, as people do). The logs already redacted them; the model, its
provider, the caller (through the answer's tool-call `_meta` and progress) and the stored
history got them in the clear. Now every one of them sees `[redacted]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.server.dependencies import get_http_headers

from pallas_api.names import TOOL_CALLS_META
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, serve

TOOLS_KEY = "tools-secret-7f3a9c1e"
LLM_KEY = "sk-llm-gateway-41d2b8"
ENVIRON = {"TOOLS_KEY": TOOLS_KEY, "LLM_KEY": LLM_KEY}


def header_mirror() -> FastMCP:
    """Tool `mirror`: reports every header of its request, as progress and as its result."""
    mcp = FastMCP("mirror")

    @mcp.tool(output_schema=None)
    async def mirror(ctx: Context) -> str:
        """Show what this request carried."""
        headers = get_http_headers(include_all=True)
        await ctx.report_progress(1, 2, f"seen x-api-key={headers.get('x-api-key')}")
        return json.dumps(headers)

    return mcp


@pytest.fixture
async def mirror_server() -> AsyncIterator[RunningServer]:
    async with serve(header_mirror()) as running:
        yield running


async def test_secret_header_values_and_the_provider_key_are_scrubbed_from_tool_results(
    mirror_server: RunningServer,
) -> None:
    async with FakeOpenAI(api_key=LLM_KEY) as llm:
        llm.script(ToolCalls([Call("tools__mirror", "{}")]), Text("mirrored"))
        server = {
            "name": "tools",
            "url": mirror_server.url,
            "headers": [
                {"name": "X-Api-Key", "valueFromEnv": "TOOLS_KEY"},
                {"name": "X-Gateway-Key", "valueFromEnv": "LLM_KEY"},
            ],
        }
        provider = {"name": "fake", "type": "openai", "baseURL": llm.base_url, "apiKeyEnv": "LLM_KEY"}
        config = agent_config(llm.base_url, name="scrubber", servers=[server], provider=provider)
        progress: list[str] = []

        async def on_progress(_: float, __: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with serve_agent(config, environ=ENVIRON) as agent, Client(agent.url, mode="legacy") as client:
            result = await client.call_tool(
                "send_message",
                {"message": "what do the tools see?"},
                meta={TOOL_CALLS_META: True},
                progress_handler=on_progress,
            )
            history = await client.get_prompt("scrubber_history")

    # The downstream did receive both secrets: this is what was echoed.
    sent = [r.headers for r in mirror_server.requests if r.method == "POST"]
    assert sent
    assert all((h["x-api-key"], h["x-gateway-key"]) == (TOOLS_KEY, LLM_KEY) for h in sent)

    tool_message = llm.completions[1].json["messages"][-1]
    assert tool_message["role"] == "tool"
    echoed = json.loads(tool_message["content"])
    assert (echoed["x-api-key"], echoed["x-gateway-key"]) == ("[redacted]", "[redacted]")
    (trace,) = (result.meta or {})[TOOL_CALLS_META]
    assert '"x-api-key": "[redacted]"' in trace["result"]
    assert "tools/mirror: seen x-api-key=[redacted]" in progress
    seen = {
        "llm": json.dumps([c.json for c in llm.completions]),
        "result": json.dumps(result.meta) + result.content[0].text,  # type: ignore[union-attr]
        "progress": json.dumps(progress),
        "history": json.dumps([m.content.model_dump() for m in history.messages]),
    }
    for where, text in seen.items():
        for secret in (TOOLS_KEY, LLM_KEY):
            assert secret not in text, f"{secret} reached the {where}"
    assert "[redacted]" in seen["history"]
