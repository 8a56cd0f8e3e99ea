"""Per-call provider fields: a caller may set only what the agent's `spec.callParams` allows.

Before, `params.extra` forwarded any field to the provider: `n: 128` multiplied the cost of a
call, `service_tier: priority` bought a pricier tier, `store: true` changed data retention. Each
case runs over a real agent (uvicorn on loopback) against the fake OpenAI server, which records
every request the agent makes.
"""

from __future__ import annotations

from typing import Any

from fastmcp import Client

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text

COSTLY = {"n": 128, "service_tier": "priority", "store": True}


async def call(client: Client[Any], params: dict[str, Any]) -> Any:
    return await client.call_tool_mcp("send_message", {"message": "hello", "params": params})


def refusal(result: Any) -> str:
    assert result.is_error
    assert result.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    return str(result.content[0].text)


async def test_by_default_no_provider_field_of_a_call_reaches_the_model(fake_openai: FakeOpenAI) -> None:
    async with serve_agent(agent_config(fake_openai.base_url)) as agent, Client(agent.url) as client:
        refused = await call(client, {"extra": COSTLY})
        assert refusal(refused) == (
            "params.extra.n, params.extra.service_tier, params.extra.store: this agent does not let "
            "a call set them (spec.callParams.extra: none)"
        )
        # The documented parameters stay open by default.
        ok = await call(client, {"temperature": 0.2, "maxTokens": 64})
    assert not ok.is_error
    (request,) = fake_openai.completions  # the refused call never reached the model
    body = request.json
    assert (body["temperature"], body["max_tokens"]) == (0.2, 64)
    assert not COSTLY.keys() & body.keys()


async def test_the_allow_list_lets_through_exactly_what_it_names_and_the_agents_own_fields_stay(
    fake_openai: FakeOpenAI,
) -> None:
    config = agent_config(
        fake_openai.base_url,
        requestParams={"seed": 7, "extra": {"store": False, "metadata": {"team": "research"}}},
        callParams={"allow": ["temperature"], "extra": ["repetition_penalty"]},
    )
    fake_openai.default = Text("fine")
    async with serve_agent(config) as agent, Client(agent.url) as client:
        allowed = await call(client, {"temperature": 0.3, "extra": {"repetition_penalty": 1.2}})
        no_seed = await call(client, {"seed": 1, "temperature": 0.1})
        no_store = await call(client, {"extra": {"store": True, "repetition_penalty": 1.0}})
        neither = await call(client, {"maxTokens": 1, "extra": {"n": 4}})
    assert not allowed.is_error
    assert refusal(no_seed) == (
        "params.seed: this agent does not let a call set it (spec.callParams.allow: temperature)"
    )
    assert refusal(no_store) == (
        "params.extra.store: this agent does not let a call set it "
        "(spec.callParams.extra: repetition_penalty)"
    )
    assert refusal(neither) == (
        "params.maxTokens, params.extra.n: this agent does not let a call set them "
        "(spec.callParams.allow: temperature; spec.callParams.extra: repetition_penalty)"
    )
    (request,) = fake_openai.completions
    body = request.json
    # The call's allowed field joins the agent's own, which stay whatever the call says.
    assert {k: body[k] for k in ("temperature", "seed", "repetition_penalty", "store", "metadata")} == {
        "temperature": 0.3,
        "seed": 7,
        "repetition_penalty": 1.2,
        "store": False,
        "metadata": {"team": "research"},
    }
    assert "n" not in body
