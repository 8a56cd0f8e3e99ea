"""The registry checks every LLM provider of its deployment, as the original preflight did.

Real HTTP throughout: the fake OpenAI and Anthropic servers speak the vendors' wire formats on
loopback, the registry (the `pallas run` source) is served by uvicorn, and its `/healthz`,
`/metrics` and catalogue are read over HTTP. The seed's table: an active provider must list the
models its agents use; a provider whose key is set but that no agent uses must still answer.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.status import ProviderStatus
from pallas_registry.providers import ProviderChecks
from pallas_registry.static import LocalAgent, StaticSource
from tests.support.fake_llm import Delay, FakeAnthropic, FakeOpenAI
from tests.support.operator import eventually
from tests.support.registry import assert_valid_catalogue, running_registry

OPENAI_KEY, ANTHROPIC_KEY = "sk-openai-0123456789", "sk-ant-0123456789"


def deployment(openai: FakeOpenAI, anthropic: FakeAnthropic, **providers: Any) -> PallasDeploymentSpec:
    def key(name: str) -> dict[str, Any]:
        return {"secretKeyRef": {"name": "llm", "key": name}}

    return PallasDeploymentSpec.model_validate(
        {
            "model": {"default": "vllm.qwen3-8b"},
            "providers": {
                "vllm": {"type": "openai", "baseURL": openai.base_url, "apiKey": key("VLLM_KEY")},
                "claude": {"type": "anthropic", "baseURL": anthropic.url, "apiKey": key("ANTHROPIC_KEY")},
                # Key set, not active: no agent uses these two.
                "spare": {"type": "openai", "baseURL": openai.base_url, "apiKey": key("SPARE_KEY")},
                "backup": {"type": "anthropic", "baseURL": anthropic.url, "apiKey": key("BACKUP_KEY")},
                **providers,
            },
        }
    )


def agents(spec: PallasDeploymentSpec) -> list[LocalAgent]:
    """Two agents (not running: the checks do not need them), one per active provider."""
    return [
        LocalAgent(
            name,
            PallasAgentSpec.model_validate({"deployment": "ouranos", **fields}),
            spec,
            f"http://127.0.0.1:1/{name}/mcp",
            "ouranos",
            "agents",
        )
        for name, fields in (("research", {}), ("writer", {"model": "claude.claude-sonnet-4-5"}))
    ]


def keys(**values: str) -> dict[tuple[str, str, str], str]:
    return {("agents", "ouranos", name): value for name, value in values.items()}


async def healthz(base: str) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        response = await http.get(base + "/healthz")
    assert response.status_code == 200  # a liveness probe: never anything else
    return dict(response.json())


async def checked(base: str, count: int) -> dict[str, dict[str, Any]]:
    async def all_checked() -> dict[str, dict[str, Any]] | None:
        report = await healthz(base)
        found = {p["name"]: p for p in report["providers"]}
        return found if len(found) == count else None

    found: dict[str, dict[str, Any]] = await eventually(all_checked, 10, "every provider checked")
    for entry in found.values():
        ProviderStatus.model_validate(entry)  # what the operator reads
    return found


async def test_every_provider_is_checked_active_or_not_and_named_when_it_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "pallas.registry")
    async with (
        FakeOpenAI(models=["qwen3-8b", "other"], api_key=OPENAI_KEY) as openai,
        FakeAnthropic(models=["claude-sonnet-4-5"], api_key=ANTHROPIC_KEY) as anthropic,
    ):
        spec = deployment(
            openai,
            anthropic,
            # Active-like with a model nobody serves would be caught too; here: a missing key.
            nokey={
                "type": "openai",
                "baseURL": openai.base_url,
                "apiKey": {"secretKeyRef": {"name": "llm", "key": "NOPE"}},
            },
            local={"type": "openai", "baseURL": openai.base_url},  # no apiKey: checked without one
        )
        source = StaticSource(
            agents(spec),
            provider_keys=keys(
                vllm=OPENAI_KEY, claude=ANTHROPIC_KEY, spare=OPENAI_KEY, backup="sk-ant-wrong-4711"
            ),
        )
        async with running_registry(source) as base:
            found = await checked(base, 6)
            report = await healthz(base)
            async with httpx2.AsyncClient() as http:
                exposition = (await http.get(base + "/metrics")).text
                document = (await http.get(base + "/.well-known/mcp/server.json")).json()
    assert found["vllm"]["status"] == "ok"
    assert found["vllm"]["models"] == ["qwen3-8b"]
    assert found["claude"]["status"] == "ok"
    assert found["claude"]["models"] == ["claude-sonnet-4-5"]
    assert (found["spare"]["status"], found["spare"]["models"]) == ("ok", [])
    assert "not used by any agent" in found["spare"]["message"]
    assert found["backup"]["status"] == "error"
    assert found["backup"]["message"].startswith("anthropic provider 'backup': GET ")
    assert "HTTP 401: invalid api key" in found["backup"]["message"]
    assert found["nokey"] == {
        **found["nokey"],
        "status": "error",
        "message": "openai provider 'nokey': no API key: environment variable NOPE "
        "(secretKeyRef llm/NOPE) is not set",
    }
    # The keyless one reached the fake without a key, which this fake refuses.
    assert found["local"]["status"] == "error"
    assert "HTTP 401" in found["local"]["message"]
    assert report["status"] == "degraded"
    assert_valid_catalogue(document)  # the catalogue is unaffected
    up = {
        s.labels["provider"]: s.value
        for f in text_string_to_metric_families(exposition)
        for s in f.samples
        if s.name == "pallas_registry_provider_up"
    }
    assert up == {"vllm": 1, "claude": 1, "spare": 1, "backup": 0, "nokey": 0, "local": 0}
    # What went where, in the seed's terms: only models endpoints, with the key each one has.
    openai_paths = {(r.path, r.headers.get("authorization")) for r in openai.requests}
    assert ("/v1/models", f"Bearer {OPENAI_KEY}") in openai_paths
    assert not openai.completions
    anthropic_paths = {r.path for r in anthropic.requests}
    assert anthropic_paths == {"/v1/models/claude-sonnet-4-5", "/v1/models"}
    assert not anthropic.completions
    # Warn-only, once per failure, and no key anywhere.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("LLM provider check failed" in w for w in warnings) == 3
    for text in (str(report), exposition, *warnings):
        assert OPENAI_KEY not in text
        assert "sk-ant-wrong-4711" not in text


async def test_a_model_no_longer_served_and_a_fixed_key_are_seen_on_the_next_check() -> None:
    async with (
        FakeOpenAI(models=["qwen3-8b"], api_key=OPENAI_KEY) as openai,
        FakeAnthropic(models=["claude-sonnet-4-5"], api_key=ANTHROPIC_KEY) as anthropic,
    ):
        source = StaticSource(
            agents(deployment(openai, anthropic)),
            provider_keys=keys(vllm=OPENAI_KEY, claude=ANTHROPIC_KEY, spare=OPENAI_KEY, backup="sk-old"),
        )
        checks = ProviderChecks(source.provider_targets, recheck_ok=0.2, recheck_failed=0.2, tick=0.05)
        async with running_registry(source, providers=checks) as base:
            found = await checked(base, 4)
            assert found["backup"]["status"] == "error"
            anthropic.api_key = "sk-old"  # as if the vendor now accepted it: the key is fixed
            openai.models = ["qwen3-32b"]  # and the model was taken down

            async def changed() -> dict[str, Any] | None:
                now = {p["name"]: p for p in (await healthz(base))["providers"]}
                return now if now["backup"]["status"] == "ok" and now["vllm"]["status"] == "error" else None

            now = await eventually(changed, 10, "the next checks")
    assert now["vllm"]["message"] == (
        f"openai provider 'vllm': model 'qwen3-8b' not found at {openai.base_url}/models"
    )


async def test_a_provider_that_does_not_answer_in_time_or_at_all() -> None:
    async with (
        FakeOpenAI(models=["qwen3-8b"], api_key=OPENAI_KEY) as openai,
        FakeAnthropic(models=["claude-sonnet-4-5"], api_key=ANTHROPIC_KEY) as anthropic,
    ):
        openai.script_models(Delay(5))
        spec = deployment(openai, anthropic, gone={"type": "openai", "baseURL": "http://127.0.0.1:1/v1"})
        source = StaticSource(agents(spec), provider_keys=keys(vllm=OPENAI_KEY, claude=ANTHROPIC_KEY))
        checks = ProviderChecks(source.provider_targets, timeout=0.5)
        async with running_registry(source, providers=checks) as base:
            found = await checked(base, 5)
    # The agents' preflight words it the same way: one check (pallas_io.llm_check).
    assert found["vllm"]["message"] == (
        f"openai provider 'vllm': GET {openai.base_url}/models timed out after 0.5s"
    )
    assert (
        found["gone"]["message"]
        == "openai provider 'gone': cannot reach http://127.0.0.1:1/v1: connection refused"
    )
