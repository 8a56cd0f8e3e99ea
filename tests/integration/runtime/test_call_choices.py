"""A call's own choices, through a real MCP client against the scripted fake LLM servers:
`params.model` among the models the agent offers, `params.systemAppend`, effort values the
provider does not take, and a provider keyed with each caller's own bearer token.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastmcp import Client

from pallas_api.config import AgentConfig, parse_config
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import FakeAnthropic, FakeOpenAI, Text
from tests.support.mcp_servers import serve_app


def config(
    llm: FakeOpenAI | FakeAnthropic, provider: dict[str, Any] | None = None, **extra: Any
) -> AgentConfig:
    return parse_config(
        {
            "name": "harper",
            "instruction": "You are Harper.",
            "model": llm.models[0],
            "provider": {
                "name": "llm",
                "type": "anthropic" if isinstance(llm, FakeAnthropic) else "openai",
                "baseURL": llm.base_url,
                "maxRetries": 0,
                **(provider or {}),
            },
            **extra,
        }
    )


@contextlib.asynccontextmanager
async def served(cfg: AgentConfig) -> AsyncIterator[str]:
    async with serve_app(agent_app(build_server(cfg, environ={}))) as running:
        yield running.url


def system_of(request: dict[str, Any]) -> str:
    """The system prompt of a Chat Completions request."""
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_a_call_picks_a_declared_model_and_an_undeclared_one_is_refused_with_the_list(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pallas.audit")
    async with FakeOpenAI(models=("fake-small", "fake-big")) as llm:
        llm.script(Text("small"), Text("big"), Text("small again"))
        models = [{"model": "fake-big", "capabilities": {"contextWindow": 400000}}]
        async with served(config(llm, models=models)) as url, Client(url) as c:
            first = await c.call_tool_mcp("send_message", {"message": "a"})
            chosen = await c.call_tool_mcp("send_message", {"message": "b", "params": {"model": "fake-big"}})
            refused = await c.call_tool_mcp("send_message", {"message": "c", "params": {"model": "gpt-9"}})
            again = await c.call_tool_mcp("send_message", {"message": "d"})
    assert [r.content[0].text for r in (first, chosen, again)] == ["small", "big", "small again"]
    assert [r.json["model"] for r in llm.completions] == ["fake-small", "fake-big", "fake-small"]
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    assert refused.content[0].text == (
        "params.model 'gpt-9' is not a model this agent offers (offered: fake-small, fake-big)"
    )
    turns = [r for r in caplog.records if r.getMessage().startswith("turn on model")]
    # Only the turn whose call chose is audited (the agent's own choices are in its spec).
    assert [(r.model, r.system_append) for r in turns] == [("fake-big", False)]  # type: ignore[attr-defined]


async def test_system_append_is_added_to_the_instruction_for_that_call_only(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pallas.audit")
    fake_openai.script(Text("one"), Text("two"))
    async with served(config(fake_openai)) as url, Client(url) as c:
        appended = await c.call_tool_mcp(
            "send_message", {"message": "a", "params": {"systemAppend": "Answer in French."}}
        )
        plain = await c.call_tool_mcp("send_message", {"message": "b"})
        too_long = await c.call_tool_mcp(
            "send_message", {"message": "c", "params": {"systemAppend": "x" * 16385}}
        )
    assert not appended.is_error
    assert not plain.is_error
    first, second = fake_openai.completions
    assert system_of(first.json) == "You are Harper.\n\nAnswer in French."
    assert system_of(second.json) == "You are Harper."
    assert too_long.is_error
    assert too_long.content[0].text.startswith("send_message: invalid arguments: params.systemAppend")
    (turn,) = [r for r in caplog.records if r.getMessage().startswith("turn on model")]
    assert turn.getMessage() == "turn on model fake-model, system prompt +17 chars"
    assert "Answer in French" not in caplog.text  # the addition is the caller's: never logged


async def test_a_call_params_may_not_choose_what_call_params_allow_leaves_out(
    fake_openai: FakeOpenAI,
) -> None:
    cfg = config(fake_openai, callParams={"allow": ["temperature"]})
    async with served(cfg) as url, Client(url) as c:
        refused = await c.call_tool_mcp("send_message", {"message": "a", "params": {"model": "fake-model"}})
    assert refused.is_error
    assert refused.content[0].text.startswith("params.model: this agent does not let a call set it")


async def test_effort_values_the_provider_does_not_take_are_refused_naming_value_and_provider(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.script(Text("ok"))
    async with served(config(fake_openai)) as url, Client(url) as c:
        too_much = await c.call_tool_mcp("send_message", {"message": "a", "params": {"effort": "max"}})
        fine = await c.call_tool_mcp("send_message", {"message": "b", "params": {"effort": "high"}})
    assert too_much.is_error
    assert too_much.content[0].text == (
        f"params.effort 'max': openai provider 'llm' ({fake_openai.base_url}) takes low, medium, high"
    )
    assert not fine.is_error
    assert fake_openai.completions[0].json["reasoning_effort"] == "high"
    anthropic = FakeAnthropic(models=("claude-opus-4-5",))
    async with anthropic:
        anthropic.script(Text("ok"))
        async with served(config(anthropic)) as url, Client(url) as c:
            xhigh = await c.call_tool_mcp("send_message", {"message": "a", "params": {"effort": "xhigh"}})
            high = await c.call_tool_mcp("send_message", {"message": "b", "params": {"effort": "high"}})
    assert xhigh.content[0].text == (
        "params.effort 'xhigh': anthropic provider 'llm' (model claude-opus-4-5) takes low, medium, high"
    )
    assert not high.is_error
    assert anthropic.completions[0].json["output_config"] == {"effort": "high"}


async def test_caller_bearer_is_the_key_per_call_never_logged_and_refused_without_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAI(api_key="hf_alice_token") as llm:
        llm.script(Text("hello alice"))  # the fake refuses any other key with a 401
        cfg = config(llm, provider={"credentials": "callerBearer"})
        async with served(cfg) as url:
            async with Client(url, auth="hf_alice_token") as alice:
                ok = await alice.call_tool_mcp("send_message", {"message": "hi"})
            async with Client(url, auth="hf_mallory_token") as mallory:
                refused_by_provider = await mallory.call_tool_mcp("send_message", {"message": "hi"})
            async with Client(url) as anonymous:
                no_bearer = await anonymous.call_tool_mcp("send_message", {"message": "hi"})
    assert ok.content[0].text == "hello alice"
    first, second = llm.completions
    assert first.headers["authorization"] == "Bearer hf_alice_token"
    assert second.headers["authorization"] == "Bearer hf_mallory_token"  # not alice's client again
    assert refused_by_provider.is_error
    assert refused_by_provider.structured_content["error"]["code"] == "LLM_ERROR"
    assert "HTTP 401" in refused_by_provider.content[0].text
    assert "hf_mallory_token" not in refused_by_provider.content[0].text
    assert no_bearer.is_error
    assert no_bearer.structured_content["error"]["code"] == "DENIED_BY_POLICY"
    assert no_bearer.content[0].text == (
        "provider 'llm' takes the caller's bearer token as its API key (credentials: callerBearer) "
        "and this call came with none: send Authorization: Bearer <token>"
    )
    assert len(llm.completions) == 2  # the call without a bearer never reached the model
    assert "hf_alice_token" not in caplog.text
    assert "hf_mallory_token" not in caplog.text


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


@pytest.mark.parametrize(("own_vision", "chosen_vision"), [(False, True), (True, False)])
async def test_images_are_checked_against_the_model_the_call_picks(
    own_vision: bool, chosen_vision: bool
) -> None:
    # Images need a vision model, and the model is the one the call runs on: a call picking
    # fake-big is checked against fake-big's capabilities, one picking nothing against the
    # agent's own (fake-small).
    async with FakeOpenAI(models=("fake-small", "fake-big")) as llm:
        llm.script(Text("a cat"))
        models = [{"model": "fake-big", "capabilities": {"vision": chosen_vision}}]
        cfg = config(llm, models=models, capabilities={"vision": own_vision})
        image = [{"data": PNG, "mime_type": "image/png"}]
        async with served(cfg) as url, Client(url) as c:
            chosen = await c.call_tool_mcp(
                "send_message", {"message": "what?", "images": image, "params": {"model": "fake-big"}}
            )
            own = await c.call_tool_mcp("send_message", {"message": "what?", "images": image})
    [seen, refused, refused_model] = (
        (chosen, own, "fake-small") if chosen_vision else (own, chosen, "fake-big")
    )
    assert not seen.is_error, seen.content
    assert seen.content[0].text == "a cat"
    [request] = llm.completions
    assert request.json["model"] == ("fake-big" if chosen_vision else "fake-small")
    assert any(part.get("type") == "image_url" for part in request.json["messages"][-1]["content"])
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    assert refused.content[0].text == (
        f"model {refused_model!r} does not accept images (its capabilities say vision: false)"
    )


async def test_a_call_picks_another_providers_model_with_that_providers_key() -> None:
    # The agent's own provider speaks Chat Completions; the deployment also declares a Claude
    # model on an Anthropic provider, which a call names as `<provider>.<model>`.
    anthropic_key = "sk-ant-test-other-7f3e"
    async with FakeOpenAI(models=("fake-small",)) as llm, FakeAnthropic(api_key=anthropic_key) as claude:
        llm.script(Text("from openai"), Text("openai again"))
        claude.script(Text("from claude"))
        other = {
            "name": "claude",
            "type": "anthropic",
            "baseURL": claude.base_url,
            "apiKeyEnv": "PALLAS_PROVIDER_CLAUDE_API_KEY",
            "maxRetries": 0,
        }
        models = [{"model": "claude-fake", "provider": other}]
        server = build_server(
            config(llm, models=models), environ={"PALLAS_PROVIDER_CLAUDE_API_KEY": anthropic_key}
        )
        async with serve_app(agent_app(server)) as running, Client(running.url) as c:
            first = await c.call_tool_mcp("send_message", {"message": "a"})
            chosen = await c.call_tool_mcp(
                "send_message", {"message": "b", "params": {"model": "claude.claude-fake"}}
            )
            bare = await c.call_tool_mcp("send_message", {"message": "c", "params": {"model": "claude-fake"}})
            again = await c.call_tool_mcp("send_message", {"message": "d"})
    assert [r.content[0].text for r in (first, chosen, again)] == [
        "from openai",
        "from claude",
        "openai again",
    ]
    [request] = claude.completions
    assert request.json["model"] == "claude-fake"
    # The fake answers 401 without this key; the SDK sends it as x-api-key or a bearer token.
    assert anthropic_key in request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    assert [r.json["model"] for r in llm.completions] == ["fake-small", "fake-small"]
    # Another provider's model is named with its provider: an id alone could be two providers'.
    assert bare.is_error
    assert bare.content[0].text == (
        "params.model 'claude-fake' is not a model this agent offers "
        "(offered: fake-small, claude.claude-fake)"
    )
