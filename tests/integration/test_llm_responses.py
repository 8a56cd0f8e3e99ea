"""The Responses API adapter (`api: responses`) with the real openai SDK against its scripted fake."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pallas_api.config import parse_config
from pallas_api.fields import RequestParams, ResponseFormat
from pallas_runtime.llm import openai_chat
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.openai_responses import OpenAIResponsesProvider
from pallas_runtime.llm.params import ParamsNotTaken
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import (
    AssistantMessage,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    Usage,
    UserMessage,
)
from tests.support.fake_llm import Call, FakeUsage, HttpError, Raw, Text, ToolCalls
from tests.support.fake_responses import FakeOpenAIResponses
from tests.support.llm_inputs import HI, PNG, SEARCH

KEY = "sk-test-responses-41d2"


@pytest.fixture
async def server():
    async with FakeOpenAIResponses(models=["gpt-5"], api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def providers():
    made = []

    def make(base_url: str | None, **agent: Any) -> OpenAIResponsesProvider:
        provider = {"name": "oai", "type": "openai", "api": "responses", "baseURL": base_url}
        provider |= {"apiKeyEnv": "KEY", "maxRetries": 1, "timeoutSeconds": 5}
        cfg = parse_config({"name": "a", "model": "gpt-5", "provider": provider, **agent})
        made.append(create_provider(cfg, {"KEY": KEY}))
        assert isinstance(made[-1], OpenAIResponsesProvider)
        return made[-1]

    yield make
    for provider in made:
        await provider.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_text_round_trip_plain_and_streamed(server, providers, streamed):
    provider = providers(server.base_url)
    server.script(
        Text("Hello there, friend.", usage=FakeUsage(input=80, output=12, cache_read=20, reasoning=4))
    )
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    completion = await provider.complete(
        system="Be brief.", messages=HI, tools=[SEARCH], on_text=on_text if streamed else None
    )
    assert completion.text == "Hello there, friend."
    assert completion.stop_reason == "stop"
    assert completion.usage == Usage(input=80, output=12, cache_read=20, reasoning=4)
    assert "".join(pieces) == ("Hello there, friend." if streamed else "")
    [request] = server.completions
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json["instructions"] == "Be brief."
    assert request.json["store"] is False
    assert request.json["input"] == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert request.json["tools"] == [
        {
            "type": "function",
            "name": "web__search",
            "description": "Search the web",
            "parameters": SEARCH.input_schema,
        }
    ]
    assert request.json.get("stream", False) is streamed


@pytest.mark.parametrize("streamed", [False, True])
async def test_tool_calls_with_malformed_arguments(server, providers, streamed):
    provider = providers(server.base_url)
    server.script(
        ToolCalls(
            [Call("web__search", '{"q": "pallas"}', id="call_a"), Call("web__search", '{"q": ', id="call_b")],
            text="Looking.",
        )
    )

    async def ignore(piece: str) -> None:
        return None

    completion = await provider.complete(
        system="", messages=HI, tools=[SEARCH], on_text=ignore if streamed else None
    )
    good, bad = completion.tool_calls
    assert good == ToolCall("call_a", "web__search", {"q": "pallas"})
    assert bad.id == "call_b"
    assert "not valid JSON" in (bad.arguments_error or "")
    assert completion.text == "Looking."
    assert completion.stop_reason == "tool_calls"


async def test_a_tool_round_with_images_goes_as_input_items(server, providers):
    provider = providers(server.base_url)
    conversation = [
        UserMessage((TextPart("what do you see?"), PNG)),
        AssistantMessage("Let me look.", (ToolCall("call_1", "cam__snap", {"zoom": 2}),)),
        ToolResultsMessage((ToolResult("call_1", "cam__snap", (TextPart("snapped"), PNG)),)),
    ]
    await provider.complete(system="", messages=conversation, tools=[])
    sent = server.completions[0].json
    assert "instructions" not in sent
    items = sent["input"]
    assert items[0]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,iVBORw0KGgo=",
    }
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Let me look."}],
    }
    assert items[2] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "cam__snap",
        "arguments": '{"zoom": 2}',
    }
    assert items[3]["type"] == "function_call_output"
    assert items[3]["output"] == "snapped\n[1 image(s) attached in the next message]"
    assert items[4]["role"] == "user"
    assert items[4]["content"][1]["type"] == "input_image"


async def test_parameters_on_the_wire_and_those_it_has_no_field_for(server, providers):
    params = RequestParams(
        temperature=0.3,
        max_tokens=100_000,
        effort="high",
        response_format=ResponseFormat.model_validate(
            {"type": "json_schema", "jsonSchema": {"name": "w", "schema": {"type": "object"}, "strict": True}}
        ),
        tool_choice="web__search",
        extra={"metadata": {"team": "blue"}},
    )
    provider = providers(server.base_url, capabilities={"maxOutputTokens": 4096})
    await provider.complete(system="", messages=HI, tools=[SEARCH], params=params)
    sent = server.completions[0].json
    assert {
        k: sent[k]
        for k in ("temperature", "max_output_tokens", "reasoning", "text", "tool_choice", "metadata")
    } == {
        "temperature": 0.3,
        "max_output_tokens": 4096,
        "reasoning": {"effort": "high"},
        "text": {
            "format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}
        },
        "tool_choice": {"type": "function", "name": "web__search"},
        "metadata": {"team": "blue"},
    }
    with pytest.raises(ParamsNotTaken) as refused:
        provider.check_params(RequestParams(seed=3, stop=["x"]))
    assert str(refused.value).startswith("params.stop, params.seed: openai provider 'oai'")


async def test_effort_a_compatible_server_does_not_take_is_refused_per_call(server, providers):
    provider = providers(server.base_url)
    with pytest.raises(
        ParamsNotTaken, match=r"params\.effort 'max': openai provider 'oai' .* takes low, medium, high"
    ):
        provider.check_params(RequestParams(effort="max"))
    provider.check_params(RequestParams(effort="high"))


async def test_errors_are_mapped_and_never_hold_the_key(server, providers):
    provider = providers(server.base_url)
    server.script(HttpError(429, "slow down"), Text("after a retry"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "after a retry"
    server.script(HttpError(400, f"bad input near {KEY}"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert failed.value.status == 400
    assert str(failed.value).startswith("openai provider 'oai': HTTP 400: bad input near [redacted]")
    server.script(
        Raw(body={"id": "resp_x", "object": "response", "status": "failed", "error": {"message": "boom"}})
    )
    with pytest.raises(LLMError, match="unusable response: the response failed: boom"):
        await provider.complete(system="", messages=HI, tools=[])


async def test_preflight_uses_the_models_endpoint(server, providers):
    assert (await providers(server.base_url).preflight()).ok


@pytest.mark.parametrize("streamed", [False, True])
async def test_top_k_reaches_a_responses_server_that_takes_it(server, providers, streamed):
    # OpenResponses servers (mistral.rs, SGLang, vLLM) read a top-level `top_k`.
    provider = providers(server.base_url, requestParams={"topK": 40})
    server.script(Text("a"), Text("b"))
    sink = [] if streamed else None

    async def on_text(text: str) -> None:
        assert sink is not None
        sink.append(text)

    await provider.complete(system="", messages=HI, tools=[], on_text=on_text if streamed else None)
    provider.check_params(RequestParams(top_k=3))  # a call's own topK is taken too
    await provider.complete(system="", messages=HI, tools=[], params=RequestParams(top_k=3))
    assert [c.json["top_k"] for c in server.completions] == [40, 3]


async def test_openai_itself_ignores_top_k_with_a_warning_and_does_not_refuse_it(
    server, providers, monkeypatch, caplog
):
    # No baseURL means api.openai.com; point the SDK default at the fake to watch the wire.
    monkeypatch.setattr(openai_chat, "DEFAULT_BASE_URL", server.base_url)
    provider = providers(None)
    with caplog.at_level(logging.WARNING, logger="pallas.llm"):
        provider.check_params(RequestParams(top_k=3))  # the seed: "OpenAI ignores" (not refused)
        await provider.complete(system="", messages=HI, tools=[], params=RequestParams(top_k=3))
    assert "top_k" not in server.completions[0].json
    [warning] = [r.getMessage() for r in caplog.records if r.name == "pallas.llm"]
    assert warning == "openai provider 'oai' (" + server.base_url + ") ignores topK; not sending it"
