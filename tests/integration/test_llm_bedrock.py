"""Anthropic on Amazon Bedrock: the anthropic SDK's Bedrock client against a fake speaking
Bedrock's wire format (paths, bearer API key, event-stream frames), plain and streamed."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic._constants import ANTHROPIC_API_VERSION

from pallas_api.config import parse_config
from pallas_api.fields import RequestParams
from pallas_runtime.llm.anthropic_bedrock import AnthropicBedrockProvider
from pallas_runtime.llm.event_stream import EventStreamError, FrameReader, encode_frame
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TextPart, ToolCall, ToolSpec, Usage, UserMessage
from tests.support.fake_bedrock import BedrockException, FakeBedrock
from tests.support.fake_llm import Call, FakeUsage, HttpError, Text, ToolCalls

KEY = "ABSKQmVkcm9ja0FQSUtleS1mYWtl"
MODEL = "anthropic.claude-opus-4-7-20260101-v1:0"
SEARCH = ToolSpec(
    "web__search", "Search the web", {"type": "object", "properties": {"q": {"type": "string"}}}
)
HI = [UserMessage((TextPart("hi"),))]


@pytest.fixture
async def bedrock():
    async with FakeBedrock(api_key=KEY) as fake:
        yield fake


@pytest.fixture
async def providers():
    made: list[Any] = []

    def make(base_url: str, environ: dict[str, str] | None = None) -> AnthropicBedrockProvider:
        provider = {"name": "bedrock", "type": "anthropic", "platform": "bedrock", "region": "eu-central-1"}
        provider |= {"baseURL": base_url, "apiKeyEnv": "KEY", "maxRetries": 1, "timeoutSeconds": 5}
        cfg = parse_config({"name": "a", "model": MODEL, "provider": provider})
        made.append(create_provider(cfg, {"KEY": KEY} if environ is None else environ))
        assert isinstance(made[-1], AnthropicBedrockProvider)
        return made[-1]

    yield make
    for provider in made:
        await provider.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_text_round_trip_plain_and_streamed(bedrock, providers, streamed):
    provider = providers(bedrock.url)
    bedrock.script(Text("Hello from Bedrock.", usage=FakeUsage(input=40, output=9, cache_read=8)))
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    completion = await provider.complete(
        system="Be brief.",
        messages=HI,
        tools=[SEARCH],
        params=RequestParams(effort="xhigh"),
        on_text=on_text if streamed else None,
    )
    assert completion.text == "Hello from Bedrock."
    assert completion.usage == Usage(input=40, output=9, cache_read=8)
    assert completion.stop_reason == "end_turn"
    assert "".join(pieces) == ("Hello from Bedrock." if streamed else "")
    [request] = bedrock.completions
    suffix = "invoke-with-response-stream" if streamed else "invoke"
    assert request.path == f"/model/{MODEL}/{suffix}"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "model" not in request.json
    assert "stream" not in request.json
    assert request.json["anthropic_version"] == ANTHROPIC_API_VERSION  # the SDK's Bedrock client adds it
    assert request.json["system"] == "Be brief."
    assert request.json["output_config"] == {"effort": "xhigh"}  # Opus 4.7, matched under Bedrock's id
    assert request.json["tools"][0]["name"] == "web__search"


async def test_streamed_tool_calls(bedrock, providers):
    provider = providers(bedrock.url)
    bedrock.script(ToolCalls([Call("web__search", {"q": "pallas"}, id="toolu_1")], text="Searching."))

    async def ignore(piece: str) -> None:
        return None

    completion = await provider.complete(system="", messages=HI, tools=[SEARCH], on_text=ignore)
    assert completion.tool_calls == (ToolCall("toolu_1", "web__search", {"q": "pallas"}),)
    assert completion.text == "Searching."
    assert completion.stop_reason == "tool_use"


async def test_errors_are_mapped_retried_and_never_hold_the_key(bedrock, providers):
    provider = providers(bedrock.url)
    bedrock.script(HttpError(429, "Too many requests"), Text("after a retry"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "after a retry"
    bedrock.script(HttpError(400, f"Malformed input request near {KEY}"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert failed.value.status == 400
    assert (
        str(failed.value) == "anthropic provider 'bedrock': HTTP 400: Malformed input request near [redacted]"
    )


async def test_an_exception_frame_mid_stream_is_an_llm_error_after_the_text_before_it(bedrock, providers):
    provider = providers(bedrock.url)
    bedrock.script(BedrockException("Half", kind="throttlingException", message="Too many tokens"))
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    with pytest.raises(LLMError, match="throttlingException: Too many tokens"):
        await provider.complete(system="", messages=HI, tools=[], on_text=on_text)
    assert pieces == ["Half"]


async def test_a_wrong_key_and_a_missing_one(bedrock, providers):
    wrong = providers(bedrock.url, {"KEY": "not-the-key"})
    with pytest.raises(LLMError, match="HTTP 401"):
        await wrong.complete(system="", messages=HI, tools=[])
    missing = providers(bedrock.url, {})
    check = await missing.preflight()
    assert not check.ok
    assert "no API key" in check.message
    assert (await providers(bedrock.url).preflight()).ok
    assert bedrock.completions[0].headers["authorization"] == "Bearer not-the-key"


def test_frames_round_trip_in_any_pieces_and_a_bad_checksum_is_refused():
    frames = encode_frame({":event-type": "chunk", "x": "é"}, b'{"a":1}') + encode_frame({}, b"")
    reader = FrameReader()
    got = [frame for byte in range(len(frames)) for frame in reader.feed(frames[byte : byte + 1])]
    assert [(f.headers, f.payload) for f in got] == [
        ({":event-type": "chunk", "x": "é"}, b'{"a":1}'),
        ({}, b""),
    ]
    broken = bytearray(encode_frame({}, b"payload"))
    broken[-6] ^= 0xFF
    with pytest.raises(EventStreamError, match="checksum"):
        FrameReader().feed(bytes(broken))
