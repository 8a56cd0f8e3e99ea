"""Which providers the registry checks, with which models and keys (pure; the checks are in
tests/integration/registry/test_provider_checks.py)."""

from __future__ import annotations

from pallas_api.spec import PallasDeploymentSpec, ProviderSpec
from pallas_io.llm_check import ProviderEndpoint
from pallas_registry.providers import ProviderTarget, deployment_targets

SPEC = PallasDeploymentSpec.model_validate(
    {
        "model": {"default": "vllm.qwen3-8b"},
        "providers": {
            "vllm": {
                "type": "openai",
                "baseURL": "http://vllm:8000/v1",
                "apiKey": {"secretKeyRef": {"name": "llm", "key": "VLLM_KEY"}},
            },
            "openai": {"type": "openai", "apiKey": {"secretKeyRef": {"name": "llm", "key": "OPENAI_KEY"}}},
            "claude": {"type": "anthropic", "apiKey": {"secretKeyRef": {"name": "llm", "key": "ANT_KEY"}}},
            "local": {"type": "openai", "baseURL": "http://llama:8080/v1"},
        },
    }
)


def keys(name: str, spec: ProviderSpec) -> str | None:
    return {"vllm": "sk-v", "openai": "sk-o"}.get(name)


def test_every_provider_is_a_target_with_the_models_in_use() -> None:
    used = ["vllm.qwen3-8b", "vllm.qwen3-32b", "vllm.qwen3-8b", "claude.claude-sonnet-4-5", "junk"]
    found = {t.endpoint.name: t for t in deployment_targets("ouranos", SPEC.providers, used, keys)}
    targets = {name: target.endpoint for name, target in found.items()}
    assert found["vllm"] == ProviderTarget(
        "ouranos",
        ProviderEndpoint(
            "vllm",
            "openai",
            "http://vllm:8000/v1",
            ("qwen3-32b", "qwen3-8b"),
            "Secret llm key VLLM_KEY",
            "sk-v",
        ),
    )
    # Key set, not active: checked all the same, with no model to look for.
    assert (targets["openai"].models, targets["openai"].key) == ((), "sk-o")
    assert targets["openai"].base == "https://api.openai.com/v1"
    # A referenced key that has no value is a target too: its check says what to set.
    assert (targets["claude"].key, targets["claude"].key_source) == (None, "Secret llm key ANT_KEY")
    assert targets["claude"].base == "https://api.anthropic.com"
    # No apiKey at all: a local server, checked without one.
    assert (targets["local"].key, targets["local"].key_source) == (None, None)


def test_the_key_never_shows_in_a_target_repr() -> None:
    (target,) = [t for t in deployment_targets("d", SPEC.providers, [], keys) if t.endpoint.name == "vllm"]
    assert "sk-v" not in repr(target)


def test_pallas_run_names_the_variable_and_uses_openai_base_url() -> None:
    targets = {
        t.endpoint.name: t.endpoint
        for t in deployment_targets(
            "d", SPEC.providers, [], keys, local=True, openai_base_url="http://127.0.0.1:9/v1"
        )
    }
    assert targets["vllm"].key_source == "environment variable VLLM_KEY (secretKeyRef llm/VLLM_KEY)"
    # Only an openai provider without a baseURL takes $OPENAI_BASE_URL, as the agents do.
    assert targets["openai"].base == "http://127.0.0.1:9/v1"
    assert targets["vllm"].base == "http://vllm:8000/v1"
    assert targets["claude"].base == "https://api.anthropic.com"
