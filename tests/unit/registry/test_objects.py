"""PallasAgent / PallasDeployment objects → AgentState, including broken ones."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from pallas_api.fields import ModelCapabilities
from pallas_api.spec import ProviderSpec
from pallas_registry.builder import VENDOR_META, InvalidAgent, build_response
from pallas_registry.objects import (
    DeploymentSettings,
    MissingStatus,
    agent_state,
    deployment_settings,
)
from pallas_registry.state import HealthView, ProviderView
from tests.support.operator import agent, at, deployment, spec, without
from tests.support.registry import assert_valid_entry, ready_status

OPENAI_VLLM = ProviderView(type="openai", display_name="vllm", json_mode=True)
SETTINGS = DeploymentSettings(
    name="ouranos",
    version="2.1.0",
    name_prefix="ca.helu.ouranos",
    model_default="vllm.qwen3-8b",
    capabilities=ModelCapabilities(vision=True, context_window=200000, max_output_tokens=32000),
    providers={"vllm": OPENAI_VLLM},
)


def ready_agent(*mods: Any) -> dict[str, Any]:
    return agent(
        "research",
        at("metadata.namespace", "agents"),
        at("metadata.creationTimestamp", "2026-11-20T08:00:00Z"),
        at("status", ready_status("research", "agents")),
        *mods,
    )


def test_deployment_settings() -> None:
    obj = deployment(
        "ouranos",
        spec(
            version="2.1.0",
            registry={"namePrefix": "ca.helu.ouranos", "publicURLTemplate": "https://x/{agent}"},
        ),
        at("spec.model.capabilities", {"vision": True, "contextWindow": 1000, "maxOutputTokens": 10}),
    )
    settings = deployment_settings(obj)
    assert settings == DeploymentSettings(
        name="ouranos",
        version="2.1.0",
        name_prefix="ca.helu.ouranos",
        public_url_template="https://x/{agent}",
        registry_url="http://ouranos-registry.default.svc.cluster.local:8080/",
        model_default="vllm.qwen3-8b",
        capabilities=ModelCapabilities(vision=True, context_window=1000, max_output_tokens=10),
        providers={"vllm": OPENAI_VLLM},
        provider_specs={"vllm": ProviderSpec.model_validate(obj["spec"]["providers"]["vllm"])},
    )


def test_deployment_defaults_and_bad_capabilities() -> None:
    obj = deployment("d", at("spec.model.capabilities", {"contextWindow": "lots"}), without("spec.providers"))
    settings = deployment_settings(obj)
    assert settings.version == "1.0.0"
    assert settings.name_prefix is None
    assert settings.capabilities == ModelCapabilities()
    assert settings.providers == {}


def test_registry_url_is_the_public_one_else_the_cluster_one() -> None:
    public = deployment("d", at("spec.registry", {"publicURL": "https://agents.example.com/pallas"}))
    assert deployment_settings(public).registry_url == "https://agents.example.com/pallas"
    cluster = deployment("d", at("metadata.namespace", "agents"), at("spec.registry", {"port": 9000}))
    assert deployment_settings(cluster).registry_url == "http://d-registry.agents.svc.cluster.local:9000/"


def test_provider_display_fields_and_capabilities() -> None:
    providers = {
        "vllm": {"type": "openai", "baseURL": "http://vllm:8000/v1"},
        "anthropic": {"type": "anthropic"},
        "gpt": {
            "type": "openai",
            "displayName": "GPT via the gateway",
            "description": "Company gateway",
            "capabilities": {"streaming": False, "vision": True, "jsonMode": False},
        },
        "odd": {"type": "openai", "capabilities": {"streaming": "sometimes"}},
    }
    settings = deployment_settings(deployment("d", at("spec.providers", providers)))
    assert settings.providers == {
        # A self-hosted endpoint is named by its key; a vendor's public API by the vendor.
        "vllm": ProviderView(type="openai", display_name="vllm", json_mode=True),
        "anthropic": ProviderView(type="anthropic", display_name="Anthropic", json_mode=False),
        "gpt": ProviderView(
            type="openai",
            display_name="GPT via the gateway",
            description="Company gateway",
            streaming=False,
            vision=True,
            json_mode=False,
        ),
        # A provider this version cannot read keeps its type and the protocol's defaults.
        "odd": ProviderView(type="openai", json_mode=True),
    }


def test_an_agent_that_overrides_the_model_publishes_that_models_capabilities() -> None:
    obj = deployment(
        "ouranos",
        at(
            "spec.model.models",
            {"vllm.vl-7b": {"vision": True, "maxOutputTokens": 4096}, "vllm.x": {"vision": 2}},
        ),
    )
    settings = deployment_settings(obj)
    own = agent_state(ready_agent(spec(model="vllm.vl-7b")), settings)
    undeclared = agent_state(ready_agent(spec(model="vllm.other")), settings)
    unreadable = agent_state(ready_agent(spec(model="vllm.x")), settings)
    assert own.model_capabilities == ModelCapabilities(vision=True, max_output_tokens=4096)
    assert build_response(own)["server"]["capabilities"]["vision"] is True
    assert undeclared.model_capabilities == ModelCapabilities()
    assert unreadable.model_capabilities == ModelCapabilities()


def test_a_ready_agent() -> None:
    obj = ready_agent(
        spec(
            title="Research Agent",
            capabilities=["web-search", "Bad Tag", 7],
            icons=[{"src": "https://x/i.svg", "sizes": ["any"]}, {"src": "ftp://nope"}, "junk"],
            service={"port": 9000},
        ),
        at("metadata.managedFields", [{"manager": "op", "time": "2026-11-21T11:00:00Z"}, {"manager": "x"}]),
    )
    state = agent_state(obj, SETTINGS)
    assert state.key == ("agents", "research")
    assert (state.title, state.description) == ("Research Agent", "Researches questions")
    assert state.tags == ("web-search",)
    assert [icon.src for icon in state.icons] == ["https://x/i.svg"]
    assert (state.model_ref, state.model, state.provider.type) == ("vllm.qwen3-8b", "qwen3-8b", "openai")
    assert (state.version, state.name_prefix, state.service_port) == ("2.1.0", "ca.helu.ouranos", 9000)
    assert state.model_capabilities.vision
    assert (state.phase, state.ready) == ("Ready", True)
    assert state.health == HealthView("ok", "", datetime(2026, 11, 21, 10, tzinfo=UTC))
    assert state.tools == ("send_message", "get_health")
    assert state.url == "http://research.agents.svc.cluster.local:8000/mcp"
    assert state.published_at == datetime(2026, 11, 20, 8, tzinfo=UTC)
    assert state.updated_at == datetime(2026, 11, 21, 11, tzinfo=UTC)
    assert state.ready_changed_at == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert not state.deleting
    built = build_response(state)
    assert_valid_entry(built)
    assert built["server"]["name"] == "ca.helu.ouranos/research"


def test_agent_model_override() -> None:
    state = agent_state(ready_agent(spec(model="anthropic.claude-sonnet-4-5")), SETTINGS)
    assert state.model_ref == "anthropic.claude-sonnet-4-5"
    assert state.provider == ProviderView()


def test_unknown_deployment_gives_defaults() -> None:
    state = agent_state(ready_agent(), None)
    assert (state.deployment, state.version, state.name_prefix, state.model_ref) == (
        "ouranos",
        "1.0.0",
        None,
        "",
    )
    assert_valid_entry(build_response(state))


def test_ready_comes_from_the_ready_condition() -> None:
    condition = {"type": "Ready", "status": "False", "message": "dependency tech-research is not Ready"}
    state = agent_state(ready_agent(at("status.conditions", [condition])), SETTINGS)
    assert not state.ready
    assert state.status_message == "dependency tech-research is not Ready"


def test_without_a_ready_condition_the_phase_decides() -> None:
    assert agent_state(ready_agent(at("status.conditions", [])), SETTINGS).ready
    assert not agent_state(ready_agent(at("status", {"phase": "Waiting"})), SETTINGS).ready


@pytest.mark.parametrize(
    "status",
    [
        None,
        {},
        "Ready",
        [],
        {"phase": "Running"},
        {"phase": None},
        {"url": "http://x/mcp"},
        {"phase": ["Ready"]},
    ],
)
def test_missing_or_invalid_status(status: Any) -> None:
    obj = ready_agent(at("status", status))
    with pytest.raises(MissingStatus):
        agent_state(obj, SETTINGS)


def test_status_without_url_publishes_the_cluster_dns_url() -> None:
    state = agent_state(ready_agent(at("status", {"phase": "Pending"})), SETTINGS)
    assert state.url is None
    built = build_response(state)
    assert built["server"]["remotes"][0]["url"] == "http://research.agents.svc.cluster.local:8000/mcp"


def test_deleting_agent() -> None:
    state = agent_state(ready_agent(at("metadata.deletionTimestamp", "2026-11-21T12:00:00Z")), SETTINGS)
    assert state.deleting


def test_bad_health_is_dropped() -> None:
    state = agent_state(ready_agent(at("status.health", {"status": "fine"})), SETTINGS)
    assert state.health is None


def mangle(value: Any, rng: random.Random) -> Any:
    junk = [None, 7, "x", [], {}, ["a", 3], {"k": None}, True, 1.5, "2026-99-99T00:00:00Z"]
    if isinstance(value, dict):
        return {k: (rng.choice(junk) if rng.random() < 0.3 else mangle(v, rng)) for k, v in value.items()}
    if isinstance(value, list):
        return [rng.choice(junk) if rng.random() < 0.3 else mangle(v, rng) for v in value]
    return value


def test_garbage_anywhere_never_crashes() -> None:
    rng = random.Random(11)
    base = ready_agent(
        spec(icons=[{"src": "https://x/i.svg"}], capabilities=["a"], service={"port": 1}),
        at("metadata.managedFields", [{"time": "2026-11-21T11:00:00Z"}]),
    )
    built = 0
    for _ in range(400):
        obj = mangle(base, rng)
        try:
            state = agent_state(obj, SETTINGS)
        except MissingStatus:
            continue
        try:
            assert_valid_entry(build_response(state))
            built += 1
        except InvalidAgent:
            continue
    assert built > 50


def test_an_agent_serves_a2a_unless_its_spec_turns_it_off() -> None:
    assert agent_state(ready_agent(), SETTINGS).a2a
    assert not agent_state(ready_agent(at("spec.a2a", {"enabled": False})), SETTINGS).a2a


def test_the_agent_budgets_spend_reaches_the_catalogues_meta() -> None:
    spend = {
        "window": "month",
        "tokens": 7,
        "cost": 0.25,
        "costLimit": 10.0,
        "resetsAt": "2026-12-01T00:00:00Z",
    }
    obj = ready_agent(at("status.health.spend", spend))
    state = agent_state(obj, SETTINGS)
    assert state.health is not None
    assert state.health.spend is not None
    entry = build_response(state)
    assert_valid_entry(entry)
    assert entry["_meta"]["dev.pallas/agent"]["health"]["spend"] == spend
    broken = agent_state(ready_agent(at("status.health.spend", {"tokens": "lots"})), SETTINGS)
    assert broken.health is not None
    assert broken.health.spend is None  # a malformed spend is left out, the rest stays


def test_the_providers_list_every_model_a_call_may_pick_of_every_provider() -> None:
    # The seed's `providers[].models`: what `params.model` may name, so a client sees the choices.
    obj = deployment(
        "ouranos",
        at(
            "spec.providers",
            {
                "vllm": {"type": "openai", "baseURL": "http://vllm:8000/v1"},
                "anthropic": {"type": "anthropic"},
            },
        ),
        at("spec.model.default", "vllm.qwen3-8b"),
        at(
            "spec.model.models",
            {"vllm.qwen3-32b": {}, "anthropic.claude-sonnet-4-5": {"vision": True}},
        ),
    )
    chosen = ready_agent(spec(model="vllm.qwen3-32b"), at("status.model", "qwen3-32b"))
    state = agent_state(chosen, deployment_settings(obj))
    built = build_response(state)
    assert_valid_entry(built)
    providers = built["_meta"][VENDOR_META]["providers"]
    assert [(p["id"], p["models"], p["capabilities"]["vision"]) for p in providers] == [
        ("vllm", ["qwen3-32b", "qwen3-8b"], False),
        ("anthropic", ["claude-sonnet-4-5"], True),
    ]
