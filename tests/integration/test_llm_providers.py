"""The real OpenAI and Anthropic SDK clients against scripted fake servers on loopback."""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest

from pallas_api.config import parse_config
from pallas_runtime.llm import openai_chat
from pallas_runtime.llm.factory import create_provider
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
from tests.support.fake_llm import (
    Call,
    Delay,
    FakeAnthropic,
    FakeOpenAI,
    FakeUsage,
    HttpError,
    Raw,
    Text,
    ToolCalls,
)
from tests.support.llm_inputs import HI, PNG, SEARCH

KEY = "sk-test-7f3a9c1e5b"


@pytest.fixture
async def openai_server():
    async with FakeOpenAI(models=["qwen3", "llama"], api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def anthropic_server():
    async with FakeAnthropic(models=["claude-haiku-4-5", "claude-opus-4-7"], api_key=KEY) as fake:
        yield fake


def config(kind, base_url, *, model=None, key_env="LLM_KEY", **agent):
    provider = {"name": "llm", "type": kind, "apiKeyEnv": key_env, "timeoutSeconds": 5, "maxRetries": 2}
    if base_url is not None:
        provider["baseURL"] = base_url
    provider.update(agent.pop("provider", {}))
    default_model = "qwen3" if kind == "openai" else "claude-haiku-4-5"
    return parse_config({"name": "a", "model": model or default_model, "provider": provider, **agent})


@pytest.fixture
async def providers():
    made = []

    def make(cfg, environ=None):
        provider = create_provider(cfg, {"LLM_KEY": KEY} if environ is None else environ)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- OpenAI-compatible ----------------------------------------------------------------------


async def test_openai_text_turn_round_trip(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script(
        Text("Hello there.", usage=FakeUsage(input=80, output=12, cache_read=20, reasoning=4))
    )
    completion = await provider.complete(system="Be brief.", messages=HI, tools=[SEARCH])
    assert completion.text == "Hello there."
    assert completion.stop_reason == "stop"
    assert completion.usage == Usage(input=80, output=12, cache_read=20, reasoning=4)
    [request] = openai_server.completions
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json["model"] == "qwen3"
    assert request.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert request.json["tools"][0]["function"]["name"] == "web__search"


async def test_openai_tool_calls_with_malformed_arguments(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script(
        ToolCalls(
            [Call("web__search", '{"q": "pallas"}', id="call_a"), Call("web__search", '{"q": ', id="call_b")]
        )
    )
    completion = await provider.complete(system="", messages=HI, tools=[SEARCH])
    good, bad = completion.tool_calls
    assert good == ToolCall("call_a", "web__search", {"q": "pallas"})
    assert bad.id == "call_b"
    assert bad.arguments == {}
    assert "not valid JSON" in (bad.arguments_error or "")
    assert completion.stop_reason == "tool_calls"


async def test_openai_tool_round_with_images(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    conversation = [
        UserMessage((TextPart("what do you see?"), PNG)),
        AssistantMessage("", (ToolCall("call_1", "cam__snap", {}),)),
        ToolResultsMessage((ToolResult("call_1", "cam__snap", (TextPart("snapped"), PNG)),)),
    ]
    await provider.complete(system="", messages=conversation, tools=[])
    sent = openai_server.completions[0].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[0]["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="
    assert sent[1]["tool_calls"][0]["function"] == {"name": "cam__snap", "arguments": "{}"}
    assert sent[2]["tool_call_id"] == "call_1"
    assert "cam__snap" in sent[3]["content"][0]["text"]
    assert sent[3]["content"][1]["type"] == "image_url"


async def test_openai_usage_details_may_be_missing(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script(
        Text("a", usage={"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
        Text("b", usage=None),
    )
    assert (await provider.complete(system="", messages=HI, tools=[])).usage == Usage(input=9, output=2)
    assert (await provider.complete(system="", messages=HI, tools=[])).usage == Usage()


async def test_openai_retries_a_429_then_succeeds(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script(HttpError(429, "Rate limit reached"), Text("made it"))
    completion = await provider.complete(system="", messages=HI, tools=[])
    assert completion.text == "made it"
    assert len(openai_server.completions) == 2


async def test_openai_gives_up_on_a_persistent_500_after_max_retries(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.default = HttpError(500, "The server had an error")
    with pytest.raises(LLMError) as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert raised.value.status == 500
    assert str(raised.value) == "openai provider 'llm': HTTP 500: The server had an error"
    assert len(openai_server.completions) == 3


async def test_openai_400_fails_at_once(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script(HttpError(400, "'messages' must contain at least one message"))
    with pytest.raises(LLMError, match=r"HTTP 400: 'messages' must contain") as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert raised.value.status == 400
    assert len(openai_server.completions) == 1


async def test_openai_timeout(openai_server, providers):
    cfg = config("openai", openai_server.base_url, provider={"timeoutSeconds": 0.2, "maxRetries": 0})
    provider = providers(cfg)
    openai_server.script(Delay(5))
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.2s") as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert time.monotonic() - started < 2
    assert raised.value.status is None


async def test_a_timeout_after_retries_says_how_long_the_call_took_in_all(openai_server, providers):
    cfg = config("openai", openai_server.base_url, provider={"timeoutSeconds": 0.2, "maxRetries": 1})
    provider = providers(cfg)
    openai_server.script(Delay(5), Delay(5))
    started = time.monotonic()
    with pytest.raises(LLMError) as raised:
        await provider.complete(system="", messages=HI, tools=[])
    waited = time.monotonic() - started
    match = re.search(r"timed out after 0\.2s on each of 2 attempts \((\d+\.\d)s in all\)", str(raised.value))
    assert match, str(raised.value)
    assert 0.4 <= float(match[1]) <= waited + 0.05
    assert len(openai_server.completions) == 2


async def test_openai_connection_refused(providers):
    cfg = config("openai", f"http://127.0.0.1:{closed_port()}/v1", provider={"maxRetries": 0})
    with pytest.raises(LLMError, match=r"cannot reach http://127\.0\.0\.1"):
        await providers(cfg).complete(system="", messages=HI, tools=[])


async def test_openai_error_text_never_holds_the_key(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))

    def echo_key(_body):
        message = f"Incorrect API key provided: {KEY}. Header was 'Bearer {KEY}'."
        return Raw(401, {"error": {"message": message, "type": "invalid_request_error"}})

    openai_server.script(echo_key)
    with pytest.raises(LLMError) as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert KEY not in str(raised.value)
    assert "[redacted]" in str(raised.value)
    assert raised.value.status == 401


async def test_openai_wrong_key_is_reported(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url), {"LLM_KEY": "sk-wrong"})
    with pytest.raises(LLMError, match="HTTP 401") as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert "sk-wrong" not in str(raised.value)


async def test_openai_without_key_variable_sends_a_placeholder(providers):
    async with FakeOpenAI(models=["qwen3"]) as fake:
        provider = providers(config("openai", fake.base_url, key_env=None), {})
        assert (await provider.complete(system="", messages=HI, tools=[])).text == "ok"
        assert fake.completions[0].headers["authorization"].startswith("Bearer ")


async def test_openai_missing_key_makes_no_request(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url), {})
    check = await provider.preflight()
    assert check.message == "openai provider 'llm': no API key: environment variable LLM_KEY is not set"
    with pytest.raises(LLMError, match="LLM_KEY is not set"):
        await provider.complete(system="", messages=HI, tools=[])
    assert openai_server.requests == []


async def test_openai_compatible_server_gets_top_k_in_the_body(openai_server, providers, caplog):
    params = {"temperature": 0.6, "topK": 40, "maxTokens": 256, "stop": ["</done>"], "seed": 7}
    provider = providers(config("openai", openai_server.base_url, requestParams=params))
    with caplog.at_level(logging.WARNING, logger="pallas.llm"):
        await provider.complete(system="", messages=HI, tools=[])
    body = openai_server.completions[0].json
    assert {k: body[k] for k in ("temperature", "top_k", "max_tokens", "stop", "seed")} == {
        "temperature": 0.6,
        "top_k": 40,
        "max_tokens": 256,
        "stop": ["</done>"],
        "seed": 7,
    }
    assert caplog.records == []


async def test_native_openai_drops_top_k_with_one_warning(openai_server, providers, monkeypatch, caplog):
    # No baseURL means api.openai.com; point the SDK default at the fake to watch the wire.
    monkeypatch.setattr(openai_chat, "DEFAULT_BASE_URL", openai_server.base_url)
    params = {"topK": 40, "maxTokens": 256, "effort": "low"}
    provider = providers(config("openai", None, requestParams=params))
    with caplog.at_level(logging.WARNING, logger="pallas.llm"):
        await provider.complete(system="", messages=HI, tools=[])
        await provider.complete(system="", messages=HI, tools=[])
    for request in openai_server.completions:
        assert "top_k" not in request.json
        assert request.json["max_completion_tokens"] == 256
        assert request.json["reasoning_effort"] == "low"
    [warning] = [r for r in caplog.records if r.name == "pallas.llm"]
    assert warning.levelno == logging.WARNING
    assert "topK" in warning.getMessage()  # named as in the spec
    assert "openai provider 'llm'" in warning.getMessage()


async def test_openai_preflight_finds_the_model(openai_server, providers):
    check = await providers(config("openai", openai_server.base_url)).preflight()
    assert check.ok
    assert check.checked_at <= time.monotonic()
    assert [r.path for r in openai_server.requests] == ["/v1/models"]


async def test_openai_preflight_names_a_missing_model(openai_server, providers):
    check = await providers(config("openai", openai_server.base_url, model="gpt-9")).preflight()
    assert not check.ok
    assert f"model 'gpt-9' not found at {openai_server.base_url}/models" in check.message


async def test_openai_preflight_reports_errors_without_the_key(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    openai_server.script_models(Raw(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}))
    check = await provider.preflight()
    assert not check.ok
    assert "HTTP 401" in check.message
    assert KEY not in check.message


async def test_openai_preflight_timeout_and_unreachable_never_raise(openai_server, providers):
    provider = providers(config("openai", openai_server.base_url))
    provider.preflight_timeout = 0.2
    openai_server.script_models(Delay(5))
    check = await provider.preflight()
    assert not check.ok
    assert "timed out after 0.2s" in check.message
    unreachable = providers(config("openai", f"http://127.0.0.1:{closed_port()}/v1"))
    check = await unreachable.preflight()
    assert not check.ok
    assert "cannot reach" in check.message


# --- Anthropic ------------------------------------------------------------------------------


async def test_anthropic_text_turn_round_trip(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url))
    anthropic_server.script(Text("Hi.", usage=FakeUsage(input=7, output=3, cache_read=1000, cache_write=200)))
    completion = await provider.complete(system="Be brief.", messages=HI, tools=[SEARCH])
    assert completion.text == "Hi."
    assert completion.stop_reason == "end_turn"
    assert completion.usage == Usage(input=7, output=3, cache_read=1000, cache_write=200)
    [request] = anthropic_server.completions
    body = request.json
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["max_tokens"] == 16384
    assert body["tools"] == [
        {"name": "web__search", "description": "Search the web", "input_schema": SEARCH.input_schema}
    ]
    assert KEY in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))


async def test_anthropic_tool_use_then_results(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url))
    anthropic_server.script(
        ToolCalls([Call("web__search", {"q": "x"}, id="toolu_1"), Call("web__search", "oops", id="toolu_2")]),
        Text("Found it."),
    )
    first = await provider.complete(system="", messages=HI, tools=[SEARCH])
    assert first.stop_reason == "tool_use"
    good, bad = first.tool_calls
    assert good == ToolCall("toolu_1", "web__search", {"q": "x"})
    assert bad.arguments == {}
    assert bad.arguments_error
    conversation = [
        *HI,
        AssistantMessage(first.text, first.tool_calls),
        ToolResultsMessage(
            (
                ToolResult("toolu_1", "web__search", (TextPart("result"), PNG)),
                ToolResult("toolu_2", "web__search", (TextPart("bad arguments"),), is_error=True),
            )
        ),
    ]
    second = await provider.complete(system="", messages=conversation, tools=[SEARCH])
    assert second.text == "Found it."
    sent = anthropic_server.completions[1].json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[1]["content"]] == ["tool_use", "tool_use"]
    first_result, second_result = sent[2]["content"]
    assert first_result["tool_use_id"] == "toolu_1"
    assert first_result["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
    assert second_result["is_error"] is True


async def test_anthropic_sampling_params_go_in_the_body(anthropic_server, providers):
    params = {"temperature": 0.3, "topP": 0.9, "topK": 20, "maxTokens": 512, "stop": ["STOP"]}
    provider = providers(config("anthropic", anthropic_server.base_url, requestParams=params))
    await provider.complete(system="", messages=HI, tools=[])
    body = anthropic_server.completions[0].json
    assert {k: body[k] for k in ("temperature", "top_p", "top_k", "max_tokens", "stop_sequences")} == {
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 20,
        "max_tokens": 512,
        "stop_sequences": ["STOP"],
    }
    assert "system" not in body


async def test_anthropic_opus_4_7_drops_sampling_with_one_warning(anthropic_server, providers, caplog):
    params = {"temperature": 0.3, "effort": "xhigh"}
    cfg = config(
        "anthropic",
        anthropic_server.base_url,
        model="claude-opus-4-7",
        requestParams=params,
        capabilities={"maxOutputTokens": 32000},
    )
    provider = providers(cfg)
    with caplog.at_level(logging.WARNING, logger="pallas.llm"):
        await provider.complete(system="", messages=HI, tools=[])
        await provider.complete(system="", messages=HI, tools=[])
    for request in anthropic_server.completions:
        assert "temperature" not in request.json
        assert request.json["output_config"] == {"effort": "xhigh"}
        assert request.json["max_tokens"] == 32000
    [warning] = [r for r in caplog.records if r.name == "pallas.llm"]
    assert "temperature" in warning.getMessage()
    assert "anthropic provider 'llm'" in warning.getMessage()


async def test_anthropic_retries_a_429_then_succeeds(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url))
    anthropic_server.script(
        HttpError(429, "Number of request tokens has exceeded your rate limit"), Text("ok now")
    )
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "ok now"
    assert len(anthropic_server.completions) == 2


async def test_anthropic_gives_up_on_persistent_overload(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url, provider={"maxRetries": 1}))
    anthropic_server.default = HttpError(529, "Overloaded")
    with pytest.raises(LLMError) as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert raised.value.status == 529
    assert str(raised.value) == "anthropic provider 'llm': HTTP 529: Overloaded"
    assert len(anthropic_server.completions) == 2


async def test_anthropic_400_fails_at_once(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url))
    anthropic_server.script(HttpError(400, "messages: roles must alternate"))
    with pytest.raises(LLMError, match="HTTP 400: messages: roles must alternate") as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert raised.value.status == 400
    assert len(anthropic_server.completions) == 1


async def test_anthropic_timeout(anthropic_server, providers):
    provider = providers(
        config("anthropic", anthropic_server.base_url, provider={"timeoutSeconds": 0.2, "maxRetries": 0})
    )
    anthropic_server.script(Delay(5))
    with pytest.raises(LLMError, match=r"timed out after 0\.2s"):
        await provider.complete(system="", messages=HI, tools=[])


async def test_anthropic_error_text_never_holds_the_key(anthropic_server, providers):
    provider = providers(config("anthropic", anthropic_server.base_url))
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"}}
    anthropic_server.script(Raw(401, body))
    with pytest.raises(LLMError) as raised:
        await provider.complete(system="", messages=HI, tools=[])
    assert KEY not in str(raised.value)
    assert str(raised.value) == "anthropic provider 'llm': HTTP 401: invalid x-api-key [redacted]"


async def test_anthropic_preflight(anthropic_server, providers):
    check = await providers(config("anthropic", anthropic_server.base_url)).preflight()
    assert check.ok
    assert anthropic_server.requests[-1].path == "/v1/models/claude-haiku-4-5"
    missing = await providers(config("anthropic", anthropic_server.base_url, model="claude-nope")).preflight()
    assert not missing.ok
    assert (
        f"model 'claude-nope' not found at {anthropic_server.base_url}/v1/models/claude-nope"
        in missing.message
    )
    wrong_key = await providers(
        config("anthropic", anthropic_server.base_url), {"LLM_KEY": "sk-wrong"}
    ).preflight()
    assert not wrong_key.ok
    assert "HTTP 401" in wrong_key.message
    assert "sk-wrong" not in wrong_key.message
