"""Gemini: the native adapter (`type: gemini`) against a fake speaking the Gemini API's own wire
format (generateContent, streamGenerateContent with `alt=sse`, countTokens), on the Gemini API
and on Vertex AI, with Gemini 3's thought signatures carried between turns."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from fastmcp import Client

from pallas_api.config import parse_config
from pallas_io.llm_check import ProviderEndpoint, check_provider
from pallas_runtime.conversations.codec import decode, encode
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.gemini import GeminiProvider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_gemini import FakeGemini
from tests.support.fake_llm import Call, FakeUsage, HttpError, Text, ToolCalls
from tests.support.llm_inputs import HI
from tests.support.mcp_servers import header_echo_server, serve_app

KEY = "AIzaSy-fake-gemini-key-7c2"
MODEL = "gemini-3-pro-preview"
WEATHER = ToolSpec(
    "weather__forecast", "The forecast", {"type": "object", "properties": {"city": {"type": "string"}}}
)
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture
async def providers():
    async with contextlib.AsyncExitStack() as opened:

        def make(
            base_url: str, *, vertex: bool = False, model: str = MODEL, key: str = KEY
        ) -> GeminiProvider:
            provider: dict[str, Any] = {"name": "gemini", "type": "gemini", "baseURL": base_url}
            provider |= {"apiKeyEnv": "KEY", "maxRetries": 1}
            if vertex:
                provider |= {"platform": "vertex", "region": "us-central1", "projectId": "pallas-test"}
            made = create_provider(
                parse_config({"name": "a", "model": model, "provider": provider}), {"KEY": key}
            )
            assert isinstance(made, GeminiProvider)
            opened.push_async_callback(made.aclose)
            return made

        yield make


@pytest.fixture
async def gemini():
    async with FakeGemini(api_key=KEY, models=[MODEL]) as fake:
        yield fake


async def test_a_plain_answer_in_gemini_wire_format(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(Text("Hello there.", usage=FakeUsage(input=7, output=4, cache_read=5, reasoning=2)))
    completion = await provider.complete(system="Be brief.", messages=HI, tools=[WEATHER])
    assert (completion.text, completion.stop_reason) == ("Hello there.", "STOP")
    assert completion.usage == Usage(input=7, output=4, cache_read=5, reasoning=2)
    [request] = gemini.completions
    assert request.path == f"/v1beta/models/{MODEL}:generateContent"
    assert request.headers["x-goog-api-key"] == KEY
    assert "authorization" not in request.headers
    body = request.json
    assert "model" not in body
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert declaration == {
        "name": "weather__forecast",
        "description": "The forecast",
        "parametersJsonSchema": WEATHER.input_schema,
    }


async def test_a_streamed_answer_goes_out_piece_by_piece(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(Text("It will rain today.", usage=FakeUsage(input=3, output=4), interval=0.02))
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    completion = await provider.complete(system="", messages=HI, tools=[], on_text=on_text)
    assert pieces == ["It", " will", " rain", " today."]
    assert completion.text == "It will rain today."
    assert completion.usage == Usage(input=3, output=4)
    assert completion.stop_reason == "STOP"
    [request] = gemini.completions
    assert request.path == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert request.query == {"alt": "sse"}


@pytest.mark.parametrize("streamed", [False, True])
async def test_two_step_tool_use_sends_the_thought_signature_back(gemini, providers, streamed):
    """Gemini 3 refuses (400) a history whose function call lost its thoughtSignature; the
    signature survives the conversation store too (encoded and decoded between the steps)."""
    provider = providers(gemini.base_url)
    gemini.script(ToolCalls([Call("weather__forecast", {"city": "Oslo"})]), Text("Rain in Oslo."))

    async def on_text(piece: str) -> None:
        pass

    sink = on_text if streamed else None
    first = await provider.complete(system="", messages=HI, tools=[WEATHER], on_text=sink)
    [call] = first.tool_calls
    assert (call.name, call.arguments) == ("weather__forecast", {"city": "Oslo"})
    assert call.signature == gemini.signatures[0]
    stored = decode(encode(AssistantMessage(first.text, first.tool_calls, signature=first.signature)))
    result = ToolResultsMessage((ToolResult(call.id, call.name, (TextPart("rain"),)),))
    second = await provider.complete(system="", messages=[*HI, stored, result], tools=[WEATHER], on_text=sink)
    assert second.text == "Rain in Oslo."
    history = gemini.completions[1].json["contents"]
    assert history[1] == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "weather__forecast", "args": {"city": "Oslo"}},
                "thoughtSignature": gemini.signatures[0],
            }
        ],
    }
    assert history[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "weather__forecast", "response": {"result": "rain"}}}],
    }


async def test_a_call_without_its_signature_is_refused_as_gemini_3_does(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(ToolCalls([Call("weather__forecast", {"city": "Oslo"})]))
    [call] = (await provider.complete(system="", messages=HI, tools=[WEATHER])).tool_calls
    unsigned = AssistantMessage("", (call.__class__(call.id, call.name, call.arguments),))
    result = ToolResultsMessage((ToolResult(call.id, call.name, (TextPart("rain"),)),))
    with pytest.raises(LLMError, match="HTTP 400: Function call is missing a thought_signature"):
        await provider.complete(system="", messages=[*HI, unsigned, result], tools=[WEATHER])


async def test_an_image_goes_as_inline_data(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(Text("A pixel."))
    image = UserMessage((TextPart("What is this?"), ImagePart(PIXEL, "image/png")))
    assert (await provider.complete(system="", messages=[image], tools=[])).text == "A pixel."
    assert gemini.completions[0].json["contents"] == [
        {
            "role": "user",
            "parts": [{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": PIXEL}}],
        }
    ]


async def test_errors_are_retried_mapped_and_never_hold_the_key(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(HttpError(429, "Resource has been exhausted", headers={"retry-after": "0"}), Text("later"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "later"
    gemini.script(HttpError(400, f"API key {KEY} is malformed"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert str(failed.value) == "gemini provider 'gemini': HTTP 400: API key [redacted] is malformed"
    assert failed.value.status == 400
    wrong = providers(gemini.base_url, key="AIzaSy-not-the-key")
    with pytest.raises(LLMError, match="HTTP 401: API key not valid"):
        await wrong.complete(system="", messages=HI, tools=[])


async def test_a_blocked_prompt_is_an_error_naming_the_reason(gemini, providers):
    provider = providers(gemini.base_url)
    gemini.script(lambda body: {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}})
    with pytest.raises(LLMError, match=r"unusable response: the prompt was blocked \(SAFETY\)"):
        await provider.complete(system="", messages=HI, tools=[])


async def test_vertex_serves_the_same_format_with_a_bearer_token(gemini, providers):
    provider = providers(gemini.vertex_base_url, vertex=True)
    gemini.script(Text("From Vertex."))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "From Vertex."
    [request] = gemini.completions
    assert (
        request.path
        == f"/v1/projects/pallas-test/locations/us-central1/publishers/google/models/{MODEL}:generateContent"
    )
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "x-goog-api-key" not in request.headers
    assert (await provider.preflight()).ok


async def test_the_health_check_counts_tokens_so_a_wrong_key_or_model_shows(gemini, providers):
    good = await providers(gemini.base_url).preflight()
    assert good.ok, good.message
    assert gemini.counts[-1].path == f"/v1beta/models/{MODEL}:countTokens"
    wrong_key = await providers(gemini.base_url, key="AIzaSy-expired").preflight()
    assert not wrong_key.ok
    assert "HTTP 401: API key not valid" in wrong_key.message
    assert "AIzaSy-expired" not in wrong_key.message
    wrong_model = await providers(gemini.base_url, model="gemini-9-imaginary").preflight()
    assert not wrong_model.ok
    assert "HTTP 404: models/gemini-9-imaginary is not found" in wrong_model.message
    vertex = await providers(gemini.vertex_base_url, vertex=True, key="ya29.expired").preflight()
    assert not vertex.ok
    assert "Vertex AI" in vertex.message
    assert "project pallas-test" in vertex.message
    assert "HTTP 401" in vertex.message


async def test_the_registrys_check_asks_the_models_endpoint_with_the_gemini_key(gemini):
    def endpoint(*models: str, key: str = KEY) -> ProviderEndpoint:
        return ProviderEndpoint("g", "gemini", gemini.base_url, models=models, key_source="Secret k", key=key)

    assert await check_provider(endpoint(MODEL)) == (
        True,
        f"gemini provider 'g': model {MODEL!r} is available",
    )
    assert gemini.requests[-1].headers["x-goog-api-key"] == KEY
    missing = await check_provider(endpoint("gemini-0"))
    assert not missing.ok
    assert "model 'gemini-0' not found" in missing.message
    unused = await check_provider(endpoint())
    assert unused.ok, unused.message
    assert gemini.requests[-1].query == {"pageSize": "1"}
    refused = await check_provider(endpoint(key="AIzaSy-wrong"))
    assert not refused.ok
    assert "HTTP 401: API key not valid" in refused.message


async def test_an_agent_uses_tools_over_two_turns_with_gemini_3_signatures_kept_in_its_store(
    gemini, tmp_path
):
    """Through the real agent loop, a real MCP peer and the SQLite store: the second turn's
    history holds the first turn's function call, which Gemini 3 takes only with its signature."""
    async with header_echo_server() as echo:
        provider = {"name": "gemini", "type": "gemini", "baseURL": gemini.base_url, "apiKeyEnv": "KEY"}
        cfg = parse_config(
            {
                "name": "harper",
                "model": MODEL,
                "provider": provider,
                "servers": [{"name": "echo", "url": echo.url}],
                "conversations": {"type": "sqlite", "sqlitePath": str(tmp_path / "c.db")},
            }
        )
        gemini.script(ToolCalls([Call("echo__echo_headers", {})]), Text("Echoed."), Text("Still here."))
        server = build_server(cfg, environ={"KEY": KEY}, store=build_store(cfg, {}))
        async with serve_app(agent_app(server)) as running, Client(running.url, timeout=30) as client:
            first = await client.call_tool("send_message", {"message": "echo", "conversation_id": "c"})
            second = await client.call_tool("send_message", {"message": "again", "conversation_id": "c"})
    assert (first.content[0].text, second.content[0].text) == ("Echoed.", "Still here.")
    later = gemini.completions[2].json["contents"]
    assert [c["role"] for c in later] == ["user", "model", "user", "model", "user"]
    assert later[1]["parts"][0]["thoughtSignature"] == gemini.signatures[0]
