"""The caller's own bearer never comes back through a tool: a server that echoes it is scrubbed.

The attack: a `forwardInboundAuth` server is sent the caller's bearer and echoes its request
headers in its result. The bearer then reached the LLM request, the stored history, the answer
(the model repeats what it read) and the `chat` spans, though the docs say no bearer reaches a
span. The caller's credential is now scrubbed from every tool result, as the agent's secrets are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server.dependencies import get_http_headers
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pallas_io import tracing
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve

TOKEN = "caller-bearer-5e8d1f0a9b7c"


def header_mirror() -> FastMCP:
    """Tool `mirror`: answers with every header its request carried."""
    mcp = FastMCP("mirror")

    @mcp.tool(output_schema=None)
    async def mirror() -> str:
        """Show what this request carried."""
        return json.dumps(get_http_headers(include_all=True))

    return mcp


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The agent's spans, prompts included, recorded in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider, capture=True)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)


def repeat_the_tool_result(request: dict[str, Any]) -> Any:
    """The model: call the mirror, then answer with what it said (as a model may)."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Text(f"the tool said: {last['content']}")
    return ToolCalls([Call("tools__mirror", "{}")])


async def test_a_forwarded_bearer_echoed_by_a_tool_is_scrubbed_everywhere(
    spans: InMemorySpanExporter,
) -> None:
    async with serve(header_mirror()) as mirror, FakeOpenAI(default=repeat_the_tool_result) as llm:
        server = {"name": "tools", "url": mirror.url, "forwardInboundAuth": True}
        config = agent_config(llm.base_url, name="scrubber", servers=[server])
        async with serve_agent(config) as agent:
            transport = StreamableHttpTransport(agent.url, headers={"Authorization": f"Bearer {TOKEN}"})
            async with Client(transport, mode="legacy") as client:
                result = await client.call_tool_mcp("send_message", {"message": "what does the tool see?"})
                history = await client.get_prompt("scrubber_history")

    # The server was sent the bearer (it is forwarded): this is what it echoed.
    sent = [r.headers.get("authorization") for r in mirror.requests if r.method == "POST"]
    assert f"Bearer {TOKEN}" in sent
    assert not result.isError, result
    answer = result.content[0].text  # type: ignore[union-attr]
    assert '"authorization": "[redacted]"' in answer
    recorded = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    assert any("gen_ai.input.messages" in a for a in recorded)
    seen = {
        "llm": json.dumps([c.json for c in llm.completions]),
        "answer": answer,
        "history": json.dumps([m.content.model_dump() for m in history.messages]),
        "spans": json.dumps(recorded, default=str),
    }
    for where, text in seen.items():
        assert TOKEN not in text, f"the caller's bearer reached the {where}"
