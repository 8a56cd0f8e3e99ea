"""The one LLM provider check (`pallas_io.llm_check`), used by the agents' preflight and the registry.

In memory: a real httpx2 client over a MockTransport that answers as the vendors do, so what
is asked, with which headers, and every verdict's wording are seen without a socket. The same
check over real HTTP against the fake vendors: tests/integration/test_llm_providers.py (the
agent's preflight) and tests/integration/registry/test_provider_checks.py (the registry).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import httpx2
import pytest

from pallas_api.config import ProviderConfig
from pallas_io.llm_check import MAX_MESSAGE, ProviderEndpoint, Verdict, check_provider
from pallas_runtime.llm.provider import missing_key_message

KEY = "sk-test-0123456789"
Answer = Callable[[httpx2.Request], httpx2.Response | Awaitable[httpx2.Response]]


async def check(
    endpoint: ProviderEndpoint, answer: Answer, time_limit: float = 5.0
) -> tuple[Verdict, list[httpx2.Request]]:
    asked: list[httpx2.Request] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        asked.append(request)
        response = answer(request)
        return await response if inspect.isawaitable(response) else response

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
        return await check_provider(endpoint, time_limit=time_limit, client=client), asked


def models(*ids: str) -> Answer:
    return lambda request: httpx2.Response(200, json={"object": "list", "data": [{"id": i} for i in ids]})


def openai(*in_use: str, key: str | None = KEY) -> ProviderEndpoint:
    return ProviderEndpoint("vllm", "openai", "http://vllm:8000/v1/", in_use, "Secret llm key K", key)


def anthropic(*in_use: str, key: str | None = KEY) -> ProviderEndpoint:
    return ProviderEndpoint("claude", "anthropic", None, in_use, "Secret llm key A", key)


async def test_openai_lists_the_models_in_use_with_a_bearer() -> None:
    verdict, asked = await check(openai("qwen3-8b"), models("qwen3-8b", "other"))
    assert verdict == (True, "openai provider 'vllm': model 'qwen3-8b' is available")
    (request,) = asked
    assert (request.method, str(request.url)) == ("GET", "http://vllm:8000/v1/models")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    verdict, _ = await check(openai("a", "b"), models("a", "b"))
    assert verdict.message == "openai provider 'vllm': models 'a', 'b' are available"


async def test_openai_names_every_missing_model_and_where_it_looked() -> None:
    verdict, _ = await check(openai("a", "b", "c"), models("b"))
    assert verdict == (
        False,
        "openai provider 'vllm': models 'a', 'c' not found at http://vllm:8000/v1/models",
    )


async def test_a_provider_no_agent_uses_proves_its_key() -> None:
    verdict, _ = await check(openai(), models("x", "y"))
    assert verdict == (
        True,
        "openai provider 'vllm': not used by any agent; http://vllm:8000/v1/models lists 2 models",
    )
    verdict, asked = await check(anthropic(), models("claude-x"))
    assert verdict == (
        True,
        "anthropic provider 'claude': not used by any agent; https://api.anthropic.com/v1/models answers",
    )
    assert str(asked[0].url) == "https://api.anthropic.com/v1/models?limit=1"


async def test_anthropic_asks_for_each_model_with_its_own_headers() -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        found = request.url.path == "/v1/models/claude-a"
        return httpx2.Response(200 if found else 404, json={"type": "error", "error": {"message": "no"}})

    verdict, asked = await check(anthropic("claude-a"), answer)
    assert verdict == (True, "anthropic provider 'claude': model 'claude-a' is available")
    assert asked[0].headers["x-api-key"] == KEY
    assert asked[0].headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in asked[0].headers
    verdict, asked = await check(anthropic("claude-a", "claude-b"), answer)
    assert verdict == (
        False,
        "anthropic provider 'claude': model 'claude-b' not found at https://api.anthropic.com/v1/models/claude-b",
    )
    assert [r.url.path for r in asked] == ["/v1/models/claude-a", "/v1/models/claude-b"]


async def test_a_keyless_provider_is_asked_without_a_key_header() -> None:
    keyless = ProviderEndpoint("local", "openai", "http://llama:8080/v1", ("m",))
    verdict, asked = await check(keyless, models("m"))
    assert verdict.ok
    assert "authorization" not in asked[0].headers


async def test_a_named_key_without_a_value_fails_without_a_request() -> None:
    verdict, asked = await check(openai("m", key=None), models("m"))
    assert verdict == (False, "openai provider 'vllm': no API key: Secret llm key K is not set")
    assert asked == []


def test_the_agent_and_the_check_say_the_same_about_a_missing_key() -> None:
    provider = ProviderConfig.model_validate({"name": "vllm", "type": "openai", "apiKeyEnv": "VLLM_KEY"})
    endpoint = ProviderEndpoint("vllm", "openai", key_source=provider.api_key_origin())
    assert endpoint.key_problem == missing_key_message(provider)


async def test_a_refusal_carries_the_providers_words_without_the_key() -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}. Bearer {KEY}"}}
    verdict, _ = await check(openai("m"), lambda request: httpx2.Response(401, json=body))
    assert verdict == (
        False,
        "openai provider 'vllm': GET http://vllm:8000/v1/models: HTTP 401: "
        "Incorrect API key provided: [redacted]. Bearer [redacted]",
    )
    verdict, _ = await check(openai("m"), lambda request: httpx2.Response(503, text="<html>"))
    assert (
        verdict.message
        == "openai provider 'vllm': GET http://vllm:8000/v1/models: HTTP 503: Service Unavailable"
    )


async def test_an_answer_that_is_not_a_model_list() -> None:
    verdict, _ = await check(openai("m"), lambda request: httpx2.Response(200, json=["m"]))
    assert verdict == (
        False,
        "openai provider 'vllm': GET http://vllm:8000/v1/models: the answer is not a model list",
    )


async def test_messages_are_cut_after_redaction() -> None:
    """A key straddling the cut cannot leak in part: redaction comes first."""
    body = {"error": {"message": "x" * (MAX_MESSAGE - 80) + KEY * 3}}
    verdict, _ = await check(openai("m"), lambda request: httpx2.Response(500, json=body))
    assert len(verdict.message) == MAX_MESSAGE
    assert KEY[:6] not in verdict.message


@pytest.mark.looptime
async def test_the_time_limit_bounds_the_whole_check_and_names_the_request_waited_on() -> None:
    async def never(request: httpx2.Request) -> httpx2.Response:
        await asyncio.sleep(3600)
        raise AssertionError("the time limit should have ended the check")

    verdict, _ = await check(anthropic("claude-a"), never, time_limit=5)
    assert verdict == (
        False,
        "anthropic provider 'claude': GET https://api.anthropic.com/v1/models/claude-a timed out after 5s",
    )


async def test_transport_failures_are_named_and_never_raised() -> None:
    def refused(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError(
            "All connection attempts failed", request=request
        ) from ConnectionRefusedError()

    verdict, _ = await check(openai("m"), refused)
    assert verdict == (False, "openai provider 'vllm': cannot reach http://vllm:8000/v1: connection refused")

    def broken(request: httpx2.Request) -> httpx2.Response:
        raise RuntimeError(f"unexpected with {KEY}")

    verdict, _ = await check(openai("m"), broken)
    assert verdict == (
        False,
        "openai provider 'vllm': GET http://vllm:8000/v1/models failed: "
        "RuntimeError: unexpected with [redacted]",
    )


async def test_a_cloud_platform_provider_is_not_probed_but_its_key_is_required() -> None:
    from pallas_io.llm_check import ProviderEndpoint, check_provider

    bedrock = ProviderEndpoint(
        "b", "anthropic", None, models=("anthropic.claude-x",), key_source="S", key="k", region="eu-central-1"
    )
    verdict = await check_provider(bedrock, time_limit=0.01)  # no server anywhere: nothing is asked
    assert verdict.ok
    assert (
        verdict.message == "anthropic provider 'b': cloud platform (region eu-central-1); key set, not probed"
    )
    unset = ProviderEndpoint(
        "b", "anthropic", None, key_source="Secret aws key K", key=None, region="eu-central-1"
    )
    assert not (await check_provider(unset)).ok
    # No key at all: the agent's pod signs (AWS) or mints tokens (Google) with its own identity.
    keyless = ProviderEndpoint("v", "gemini", None, models=("gemini-3-pro-preview",), region="us-central1")
    verdict = await check_provider(keyless, time_limit=0.01)
    assert verdict == (
        True,
        "gemini provider 'v': cloud platform (region us-central1); the pod's cloud credentials, not probed",
    )
