"""The model's text streams to the caller: real SDK streams from the fakes, a real MCP client,
and a two-agent delegation whose sub-agent's text reaches the top caller attributed to it.

The final result is the same as without streaming; a caller that follows no progress gets no
stream (the request to the model does not ask for one).
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pallas_api.config import AgentConfig
from tests.integration.runtime.test_agent_server import agent, client, config
from tests.support.fake_llm import Call, Delay, FakeAnthropic, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import header_echo_server

ANSWER = "Streams arrive piece by piece, in order, and add up to the answer."


class Progress:
    """What a client's progress handler saw."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")

    def text(self, prefix: str) -> str:
        return "".join(m.removeprefix(prefix) for m in self.messages if m.startswith(prefix))


async def send(cfg: AgentConfig, message: str, progress: Progress | None = None) -> Any:
    async with agent(cfg) as running:
        if progress is None:
            # The MCP SDK's own session sends no progress token without a callback (fastmcp's
            # Client always has a handler, its default logging one).
            http = httpx2.AsyncClient(timeout=30)
            async with (
                http,
                streamable_http_client(running.url, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await session.call_tool("send_message", {"message": message})
        async with client(running.url) as mcp:
            return await mcp.call_tool("send_message", {"message": message}, progress_handler=progress)


async def test_openai_streams_text_and_tool_calls_through_to_the_caller(fake_openai: FakeOpenAI) -> None:
    progress = Progress()
    async with header_echo_server() as echo:
        fake_openai.script(
            ToolCalls([Call("echo__echo_headers", {"delay": 0})], text="Checking the headers first."),
            Text(ANSWER),
        )
        cfg = config(fake_openai, servers=[{"name": "echo", "url": echo.url}])
        result = await send(cfg, "go", progress)
    assert result.content[0].text == ANSWER
    assert progress.text("harper text: ") == "Checking the headers first." + ANSWER
    assert "echo/echo_headers: completed" in progress.messages
    first, second = fake_openai.completions
    assert first.json["stream"] is True
    assert first.json["stream_options"] == {"include_usage": True}
    assert json.loads(second.json["messages"][-1]["content"])["authorization"] is None  # the call ran


async def test_anthropic_streams_and_the_streamed_tool_input_is_parsed(fake_anthropic: FakeAnthropic) -> None:
    progress = Progress()
    async with header_echo_server() as echo:
        fake_anthropic.script(ToolCalls([Call("echo__echo_headers", {"delay": 0})]), Text(ANSWER))
        result = await send(
            config(fake_anthropic, servers=[{"name": "echo", "url": echo.url}]), "go", progress
        )
    assert result.content[0].text == ANSWER
    assert progress.text("harper text: ") == ANSWER
    tool_result = fake_anthropic.completions[1].json["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert not tool_result.get("is_error")


async def test_a_malformed_streamed_tool_input_goes_back_to_the_model_as_an_error(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.script(ToolCalls([Call("echo__echo_headers", "{not json")]), Text("sorry"))
    async with header_echo_server() as echo:
        await send(config(fake_anthropic, servers=[{"name": "echo", "url": echo.url}]), "go", Progress())
    tool_result = fake_anthropic.completions[1].json["messages"][-1]["content"][0]
    assert tool_result["is_error"] is True
    assert "arguments" in json.dumps(tool_result["content"])


async def test_without_a_progress_token_the_model_is_not_asked_to_stream(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text(ANSWER))
    result = await send(config(fake_openai), "go")
    assert result.content[0].text == ANSWER
    assert "stream" not in fake_openai.completions[0].json


async def test_a_provider_declared_not_to_stream_is_not_asked_to(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text(ANSWER))
    cfg = config(fake_openai)
    cfg = cfg.model_copy(update={"provider": cfg.provider.model_copy(update={"streaming": False})})
    progress = Progress()
    result = await send(cfg, "go", progress)
    assert result.content[0].text == ANSWER
    assert "stream" not in fake_openai.completions[0].json
    assert progress.text("harper text: ") == ""  # a final answer is the result, not sent twice


async def test_a_sub_agents_stream_reaches_the_top_caller_attributed_to_it(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.script(Text("The sub-agent found three sources."))
    fake_openai.script(
        ToolCalls(
            [Call("researcher__send_message", {"message": "look it up"})], text="Asking the researcher."
        ),
        Text("Done: three sources."),
    )
    progress = Progress()
    async with agent(config(fake_anthropic, name="researcher")) as researcher:
        orchestrator = config(
            fake_openai, name="orchestrator", agents=[{"name": "researcher", "url": researcher.url}]
        )
        result = await send(orchestrator, "research", progress)
    assert result.content[0].text == "Done: three sources."
    assert progress.text("orchestrator text: ") == "Asking the researcher.Done: three sources."
    relayed = "researcher/send_message: researcher text: "
    assert progress.text(relayed) == "The sub-agent found three sources."
    assert fake_anthropic.completions[0].json["stream"] is True  # the orchestrator asked for progress


async def test_a_slow_llm_turns_health_degraded_naming_it_and_faster_calls_bring_it_back(
    fake_openai: FakeOpenAI,
) -> None:
    cfg = config(fake_openai, health={"slowLlmSeconds": 0.2})
    fake_openai.script(*[Delay(0.3, then=Text("slow")) for _ in range(3)])
    async with agent(cfg) as running, client(running.url) as mcp:
        for _ in range(3):
            await mcp.call_tool_mcp("send_message", {"message": "hi"})
        slow = json.loads((await mcp.call_tool("get_health", {})).content[0].text)
        for _ in range(3):  # the fake's default answers at once
            await mcp.call_tool_mcp("send_message", {"message": "hi"})
        fast = json.loads((await mcp.call_tool("get_health", {})).content[0].text)
    assert slow["status"] == "degraded"
    assert slow["message"].startswith("Slow: LLM avg 0.3s over 3 calls (over 0.2s)")
    assert fast["status"] == "ok", fast
