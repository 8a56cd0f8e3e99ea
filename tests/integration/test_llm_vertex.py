"""Anthropic on Vertex AI: the anthropic SDK's Vertex client against a fake speaking Vertex's
wire format (project and region in the path, `:rawPredict` / `:streamRawPredict`, an OAuth
access token as the bearer), plain and streamed."""

from __future__ import annotations

from typing import Any

import pytest

from pallas_api.config import parse_config
from pallas_runtime.llm.anthropic_vertex import AnthropicVertexProvider, vertex_base_url
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TextPart, ToolCall, ToolSpec, Usage, UserMessage
from tests.support.fake_llm import Call, FakeUsage, HttpError, Text, ToolCalls
from tests.support.fake_vertex import FakeVertex

TOKEN = "ya29.fake-access-token-5e1"
MODEL = "claude-sonnet-4-6@20260101"
SEARCH = ToolSpec(
    "web__search", "Search the web", {"type": "object", "properties": {"q": {"type": "string"}}}
)
HI = [UserMessage((TextPart("hi"),))]


@pytest.fixture
async def vertex():
    async with FakeVertex(api_key=TOKEN, models=[MODEL]) as fake:
        yield fake


@pytest.fixture
async def providers():
    made: list[Any] = []

    def make(base_url: str) -> AnthropicVertexProvider:
        provider = {"name": "vertex", "type": "anthropic", "platform": "vertex", "region": "us-east5"}
        provider |= {"projectId": "pallas-test", "baseURL": base_url, "apiKeyEnv": "KEY", "maxRetries": 1}
        cfg = parse_config({"name": "a", "model": MODEL, "provider": provider})
        made.append(create_provider(cfg, {"KEY": TOKEN}))
        assert isinstance(made[-1], AnthropicVertexProvider)
        return made[-1]

    yield make
    for provider in made:
        await provider.aclose()


@pytest.mark.parametrize("streamed", [False, True])
async def test_text_and_tool_calls_plain_and_streamed(vertex, providers, streamed):
    provider = providers(vertex.base_url)
    vertex.script(
        ToolCalls(
            [Call("web__search", {"q": "pallas"}, id="toolu_1")], text="Searching.", usage=FakeUsage(7, 3)
        )
    )
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    completion = await provider.complete(
        system="Be brief.", messages=HI, tools=[SEARCH], on_text=on_text if streamed else None
    )
    assert completion.text == "Searching."
    assert completion.tool_calls == (ToolCall("toolu_1", "web__search", {"q": "pallas"}),)
    assert completion.usage == Usage(input=7, output=3)
    assert "".join(pieces) == ("Searching." if streamed else "")
    [request] = vertex.completions
    verb = "streamRawPredict" if streamed else "rawPredict"
    assert (
        request.path
        == f"/v1/projects/pallas-test/locations/us-east5/publishers/anthropic/models/{MODEL}:{verb}"
    )
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert "model" not in request.json
    assert request.json["anthropic_version"]
    assert request.json["system"] == "Be brief."


async def test_errors_are_mapped_and_never_hold_the_token(vertex, providers):
    provider = providers(vertex.base_url)
    vertex.script(HttpError(429, "Quota exceeded"), Text("after a retry"))
    assert (await provider.complete(system="", messages=HI, tools=[])).text == "after a retry"
    vertex.script(HttpError(400, f"bad request near {TOKEN}"))
    with pytest.raises(LLMError) as failed:
        await provider.complete(system="", messages=HI, tools=[])
    assert str(failed.value) == "anthropic provider 'vertex': HTTP 400: bad request near [redacted]"
    assert (await provider.preflight()).ok


def test_the_default_endpoint_is_the_sdks():
    assert vertex_base_url("us-east5") == "https://us-east5-aiplatform.googleapis.com/v1"
    assert vertex_base_url("global") == "https://aiplatform.googleapis.com/v1"
    assert vertex_base_url("eu") == "https://aiplatform.eu.rep.googleapis.com/v1"


async def test_the_health_check_reaches_vertex_so_an_expired_token_or_a_wrong_model_shows(vertex, providers):
    # Vertex has no models endpoint; the check counts a one-word message's tokens on the model.
    provider = providers(vertex.base_url)
    check = await provider.preflight()
    assert check.ok, check.message
    [count] = vertex.counts
    assert count.path == (
        "/v1/projects/pallas-test/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
    )
    assert count.json["model"] == MODEL
    assert vertex.completions == []  # the check is free: no completion was asked for
    vertex.api_key = "ya29.a-newer-token"  # the stored token expired
    expired = await provider.preflight()
    assert not expired.ok
    assert expired.message.startswith("anthropic provider 'vertex': HTTP 401: ")
    assert "Request had invalid authentication credentials." in expired.message
    assert TOKEN not in expired.message
    vertex.api_key = TOKEN
    vertex.models = ["claude-opus-4-7@20260301"]  # the model is not served in this region
    missing = await provider.preflight()
    assert not missing.ok
    assert "HTTP 404: Publisher model claude-sonnet-4-6@20260101 not found in us-east5." in missing.message
