"""Request parameters on the wire: what both adapters send for an agent's `requestParams` and a
call's `params`, against the scripted fake LLM servers (the real OpenAI/Anthropic wire formats
through the official SDKs), and what a call may not ask for.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastmcp import Client

from pallas_api.config import AgentConfig, parse_config
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import Call, FakeAnthropic, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, header_echo_server, serve_app

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def config(llm: FakeOpenAI | FakeAnthropic, echo: RunningServer, **extra: Any) -> AgentConfig:
    return parse_config(
        {
            "name": "harper",
            "model": llm.models[0],
            "provider": {
                "name": "llm",
                "type": "anthropic" if isinstance(llm, FakeAnthropic) else "openai",
                "baseURL": llm.base_url,
                "maxRetries": 0,
            },
            "servers": [{"name": "echo", "url": echo.url}],
            "capabilities": {"maxOutputTokens": 2048},
            **extra,
        }
    )


@contextlib.asynccontextmanager
async def agent_client(cfg: AgentConfig) -> AsyncIterator[Client[Any]]:
    async with serve_app(agent_app(build_server(cfg, environ={}))) as running, Client(running.url) as client:
        yield client


WIRE_FIELDS = (
    "temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "stop", "seed",
    "presence_penalty", "frequency_penalty", "response_format", "tool_choice", "repetition_penalty",
    "metadata", "stop_sequences",
)  # fmt: skip


def sent(request: dict[str, Any]) -> dict[str, Any]:
    """The parameter fields of one request as it went over the wire."""
    return {k: v for k, v in request.items() if k in WIRE_FIELDS}


async def test_openai_compatible_wire_for_agent_params_and_per_call_overrides(
    fake_openai: FakeOpenAI,
) -> None:
    agent_params = {
        "temperature": 0.6,
        "maxTokens": 100_000,  # above the model's maxOutputTokens: clamped
        "stop": ["<1>", "<2>", "<3>", "<4>", "<5>"],  # not api.openai.com: all five go
        "presencePenalty": 0.4,
        "frequencyPenalty": 0.2,
        "responseFormat": {"type": "json_schema", "jsonSchema": {"name": "weather", "schema": SCHEMA}},
        "toolChoice": "echo__echo_headers",
        "extra": {"repetition_penalty": 1.1},
    }
    fake_openai.script(
        ToolCalls([Call("echo__echo_headers", {"delay": 0})]), Text('{"city": "Oslo"}'), Text("{}")
    )
    async with (
        header_echo_server() as echo,
        agent_client(config(fake_openai, echo, requestParams=agent_params)) as c,
    ):
        first = await c.call_tool_mcp("send_message", {"message": "weather?"})
        call_params = {"temperature": 0.1, "maxTokens": None, "toolChoice": "none", "responseFormat": None}
        second = await c.call_tool_mcp("send_message", {"message": "again", "params": call_params})
    assert not first.is_error
    assert not second.is_error
    forced, answered, overridden = (sent(r.json) for r in fake_openai.completions)
    assert forced == {
        "temperature": 0.6,
        "max_tokens": 2048,
        "stop": ["<1>", "<2>", "<3>", "<4>", "<5>"],
        "presence_penalty": 0.4,
        "frequency_penalty": 0.2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}},
        "tool_choice": {"type": "function", "function": {"name": "echo__echo_headers"}},
        "repetition_penalty": 1.1,
    }
    # After the forced call the model must be free to answer: no tool_choice on the next round.
    assert answered == {k: v for k, v in forced.items() if k != "tool_choice"}
    assert overridden == {
        "temperature": 0.1,
        "stop": ["<1>", "<2>", "<3>", "<4>", "<5>"],
        "presence_penalty": 0.4,
        "frequency_penalty": 0.2,
        "tool_choice": "none",
        "repetition_penalty": 1.1,
    }


async def test_anthropic_wire_and_per_call_params_it_does_not_take(fake_anthropic: FakeAnthropic) -> None:
    agent_params = {
        "presencePenalty": 0.4,
        "toolChoice": "required",
        "extra": {"metadata": {"user_id": "u-1"}},
    }
    fake_anthropic.script(ToolCalls([Call("echo__echo_headers", {"delay": 0})]), Text("done"), Text("fine"))
    async with (
        header_echo_server() as echo,
        agent_client(config(fake_anthropic, echo, requestParams=agent_params)) as c,
    ):
        ok = await c.call_tool_mcp("send_message", {"message": "go"})
        refused = await c.call_tool_mcp(
            "send_message", {"message": "x", "params": {"frequencyPenalty": 1, "seed": 2}}
        )
        malformed = await c.call_tool_mcp("send_message", {"message": "x", "params": {"temperature": "hot"}})
        unknown_tool = await c.call_tool_mcp(
            "send_message", {"message": "x", "params": {"toolChoice": "argos__x"}}
        )
        clamped = await c.call_tool_mcp("send_message", {"message": "y", "params": {"maxTokens": 10**6}})
    assert not ok.is_error
    forced, answered, last = (sent(r.json) for r in fake_anthropic.completions)
    # presencePenalty is the agent's own: dropped (with one warning), never sent.
    assert forced == {"max_tokens": 2048, "tool_choice": {"type": "any"}, "metadata": {"user_id": "u-1"}}
    assert answered == {"max_tokens": 2048, "metadata": {"user_id": "u-1"}}
    assert last == forced  # the clamped call: maxTokens 10**6 sent as the model's 2048
    assert not clamped.is_error
    assert refused.content[0].text == (
        "params.seed, params.frequencyPenalty: "
        "anthropic provider 'llm' (model claude-fake) does not take them"
    )
    assert malformed.content[0].text.startswith("send_message: invalid arguments: params.temperature: ")
    assert unknown_tool.content[0].text.startswith(
        "toolChoice 'argos__x' is not a tool this agent offers now"
    )
    for result in (refused, malformed, unknown_tool):
        assert result.is_error
        assert result.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    assert len(fake_anthropic.completions) == 3  # refused calls never reached the model


async def test_a_peer_is_offered_to_models_without_params(fake_openai: FakeOpenAI) -> None:
    async with header_echo_server() as echo:
        worker = config(fake_openai, echo)
        async with serve_app(agent_app(build_server(worker, environ={}))) as served:
            boss = parse_config(
                {
                    "name": "boss",
                    "model": fake_openai.models[0],
                    "provider": {"name": "llm", "type": "openai", "baseURL": fake_openai.base_url},
                    "agents": [{"name": "harper", "url": served.url}],
                }
            )
            fake_openai.script(Text("hi"))
            async with agent_client(boss) as c, Client(served.url) as direct:
                await c.call_tool_mcp("send_message", {"message": "x"})
                own = next(t for t in await direct.list_tools() if t.name == "send_message")
    offered = fake_openai.completions[0].json["tools"][0]["function"]["parameters"]
    assert "params" in own.input_schema["properties"]
    assert set(offered["properties"]) == {"message", "images"}
    assert "responseFormat" not in json.dumps(offered)  # nothing of params is left to read
