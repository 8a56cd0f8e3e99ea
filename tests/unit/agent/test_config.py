"""The agent config contract: loading, errors naming fields, rendering from specs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pallas_api.config import AgentConfig, ConfigError, load_config, parse_config, render_config
from pallas_api.render import RenderError, env_name, render_agent, split_model
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec


def minimal(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "research",
        "model": "m",
        "provider": {"name": "vllm", "type": "openai"},
    }
    data.update(overrides)
    return data


def deployment(**overrides: object) -> PallasDeploymentSpec:
    data: dict[str, object] = {
        "model": {"default": "vllm.qwen3-8b", "capabilities": {"vision": True}},
        "providers": {
            "vllm": {
                "type": "openai",
                "baseURL": "http://vllm:8000/v1",
                "apiKey": {"secretKeyRef": {"name": "llm", "key": "VLLM_KEY"}},
            },
            "anthropic": {"type": "anthropic"},
        },
        "mcpServers": {
            "argos": {"url": "http://argos:8000/mcp", "timeoutSeconds": 10},
            "mnemosyne": {
                "url": "https://mn.example/mcp/",
                "forwardInboundAuth": True,
                "headers": [
                    {"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "mn", "key": "k"}}},
                    {"name": "X-Team", "value": "blue"},
                ],
            },
        },
        "healthCheck": {"timeoutSeconds": 2},
    }
    data.update(overrides)
    return PallasDeploymentSpec.model_validate(data)


def agent(**overrides: object) -> PallasAgentSpec:
    data: dict[str, object] = {"deployment": "ouranos", "servers": ["argos", "mnemosyne"]}
    data.update(overrides)
    return PallasAgentSpec.model_validate(data)


def test_defaults_are_the_documented_ones() -> None:
    config = parse_config(minimal())
    assert config.max_iterations == 12
    assert config.history.max_messages == 200
    assert config.limits.max_message_bytes == 1024 * 1024
    assert config.health.probe_timeout_seconds == 3.0
    assert config.tools.permits("anything__at_all")
    assert config.display_title == "Research"
    assert config.call_params.extra == []  # no provider field per call unless the spec lists it
    assert len(config.call_params.allow) == 14  # all but systemOverride, which is opt-in
    assert "systemOverride" not in config.call_params.allow


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (minimal(name="Bad_Name"), "name: String should match pattern"),
        (
            minimal(provider={"name": "p", "type": "cohere"}),
            "provider.type: Input should be 'openai', 'anthropic', 'gemini' or 'bedrock'",
        ),
        (minimal(maxIterations=0), "maxIterations: Input should be greater than 0"),
        (minimal(description="x" * 101), "description: String should have at most 100 characters"),
        (minimal(servers=[{"name": "a", "url": "ftp://x"}]), "servers.0.url: String should match pattern"),
        (
            minimal(servers=[{"name": "a", "url": "http://x", "headers": [{"name": "X"}]}]),
            "header 'X' needs exactly one of value or valueFromEnv",
        ),
        (minimal(unknownField=1), "unknownField: Extra inputs are not permitted"),
        (minimal(callParams={"allow": ["n"]}), "callParams.allow.0: Input should be 'temperature'"),
        (minimal(callParams={"extra": ["model"]}), "callParams.extra may not name model"),
        (minimal(agents=[{"name": "research", "url": "http://x/mcp"}]), "lists itself"),
        (
            minimal(servers=[{"name": "a", "url": "http://x"}], agents=[{"name": "a", "url": "http://y"}]),
            "'a' is listed twice",
        ),
    ],
)
def test_errors_name_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc_info:
        parse_config(data, "agent.yaml")
    assert str(exc_info.value).startswith("agent.yaml: ")
    assert message in str(exc_info.value)


def test_load_config_reports_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read \(No such file or directory\)"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        load_config(bad_json)


def test_render_config_round_trips_through_a_file(tmp_path: Path) -> None:
    config = parse_config(minimal(servers=[{"name": "argos", "url": "http://argos/mcp"}]))
    path = tmp_path / "agent.yaml"
    path.write_text(render_config(config))
    assert load_config(path) == config
    assert "baseURL" in yaml.safe_load(render_config(config))["provider"]


def test_tool_policy_globs() -> None:
    policy = parse_config(minimal(tools={"allow": ["argos__*"], "deny": ["argos__delete_*"]})).tools
    assert policy.permits("argos__search")
    assert not policy.permits("argos__delete_index")
    assert not policy.permits("mnemosyne__search")


def test_render_agent_binds_secrets_to_env_vars_and_keeps_values_out() -> None:
    rendered = render_agent("research", agent(), deployment(), {})
    config = rendered.config
    assert (config.model, config.provider.name, config.provider.type) == ("qwen3-8b", "vllm", "openai")
    assert config.provider.base_url == "http://vllm:8000/v1"
    assert config.provider.api_key_env == "PALLAS_PROVIDER_VLLM_API_KEY"
    assert config.capabilities.vision is True
    assert config.health.probe_timeout_seconds == 2
    mnemosyne = config.servers[1]
    assert mnemosyne.forward_inbound_auth is True
    assert [(h.name, h.value, h.value_from_env) for h in mnemosyne.headers] == [
        ("X-Api-Key", None, "PALLAS_SERVER_MNEMOSYNE_HEADER_0"),
        ("X-Team", "blue", None),
    ]
    assert [(b.env, b.ref.name, b.ref.key) for b in rendered.secrets] == [
        ("PALLAS_PROVIDER_VLLM_API_KEY", "llm", "VLLM_KEY"),
        ("PALLAS_SERVER_MNEMOSYNE_HEADER_0", "mn", "k"),
    ]
    # The key's name (never a value) is there only to be named in messages: what the user set.
    text = render_config(config)
    assert "apiKeySource: Secret llm key VLLM_KEY" in text
    assert "secretKeyRef" not in text


def test_render_agent_carries_the_deployments_shared_prompts_in_order() -> None:
    rendered = render_agent("research", agent(), deployment(prompts=["House rules.", "Context."]), {})
    assert rendered.config.prompts == ["House rules.", "Context."]
    assert render_agent("research", agent(), deployment(), {}).config.prompts == []


def test_render_agent_model_override_and_peers() -> None:
    rendered = render_agent(
        "boss",
        agent(model="anthropic.claude-sonnet-4-5", agents=["research"], servers=[]),
        deployment(),
        {"research": "http://research.ns.svc.cluster.local:8000/mcp"},
    )
    assert (rendered.config.provider.type, rendered.config.model) == ("anthropic", "claude-sonnet-4-5")
    assert rendered.config.agents[0].url == "http://research.ns.svc.cluster.local:8000/mcp"
    # The deployment's default model stays a call's choice, so its provider's key is bound too.
    assert [binding.env for binding in rendered.secrets] == ["PALLAS_PROVIDER_VLLM_API_KEY"]


def test_each_agent_gets_the_capabilities_of_its_own_model() -> None:
    dep = deployment(
        model={
            "default": "vllm.qwen3-8b",
            "capabilities": {"vision": False, "contextWindow": 32768, "maxOutputTokens": 8192},
            "models": {"anthropic.claude-sonnet-4-5": {"vision": True, "contextWindow": 200000,
                                                       "maxOutputTokens": 64000}},
        }
    )  # fmt: skip
    claude = render_agent("a", agent(model="anthropic.claude-sonnet-4-5"), dep, {}).config.capabilities
    default = render_agent("b", agent(), dep, {}).config.capabilities
    undeclared = render_agent("c", agent(model="vllm.llama-3-70b"), dep, {}).config.capabilities
    assert (claude.vision, claude.context_window, claude.max_output_tokens) == (True, 200000, 64000)
    assert (default.vision, default.context_window, default.max_output_tokens) == (False, 32768, 8192)
    assert (undeclared.vision, undeclared.context_window, undeclared.max_output_tokens) == (
        False,
        131072,
        16384,
    )


@pytest.mark.parametrize(
    ("spec", "reason", "missing"),
    [
        (agent(model="bedrock.titan"), "ProviderNotFound", ("bedrock",)),
        (agent(agents=["ghost"]), "AgentNotFound", ("ghost",)),
    ],
)
def test_render_agent_names_what_is_missing(
    spec: PallasAgentSpec, reason: str, missing: tuple[str, ...]
) -> None:
    with pytest.raises(RenderError) as exc_info:
        render_agent("research", spec, deployment(), {})
    assert (exc_info.value.reason, exc_info.value.missing) == (reason, missing)
    assert missing[0] in str(exc_info.value)


def test_model_refs_and_env_names() -> None:
    assert split_model("vllm.qwen3.5-8b") == ("vllm", "qwen3.5-8b")
    assert env_name("server", "my-tools", "header", "0") == "PALLAS_SERVER_MY_TOOLS_HEADER_0"


def test_deployment_default_model_must_name_a_provider() -> None:
    with pytest.raises(ValueError, match="names provider 'nope'"):
        deployment(model={"default": "nope.model"})


def test_agent_config_is_immutable() -> None:
    config = parse_config(minimal())
    with pytest.raises(ValueError, match="frozen"):
        config.name = "other"  # type: ignore[misc]
    assert isinstance(config, AgentConfig)


def test_conversations_are_keyed_by_namespace_deployment_name_and_uid() -> None:
    pod = render_agent("research", agent(), deployment(), {}, namespace="team-a", uid="0f9e-uid").config
    assert pod.identity == "team-a/ouranos/research/0f9e-uid"
    other = render_agent("research", agent(deployment="hyperion"), deployment(), {}, namespace="team-a")
    assert other.config.identity == "team-a/hyperion/research"  # pallas run: no UID, re-runs continue
    assert render_agent("research", agent(), deployment(), {}, namespace="team-b").config.identity == (
        "team-b/ouranos/research"
    )
    # A config written by hand keys by the agent's name, as before identities.
    assert parse_config(minimal()).identity == "research"


@pytest.mark.parametrize(
    ("deployment_scope", "agent_scope", "auth", "scope"),
    [
        (None, None, "none", "session"),  # private without identities
        (None, None, "oidc", "caller"),  # continuous per identified caller
        ("request", None, "oidc", "request"),
        ("request", "caller", "none", "caller"),  # the agent overrides the deployment
    ],
)
def test_the_conversation_scope_follows_the_agent_then_the_deployment_then_auth(
    deployment_scope: str | None, agent_scope: str | None, auth: str, scope: str
) -> None:
    dep = deployment(
        conversations={"scope": deployment_scope} if deployment_scope else {},
        auth={
            "mode": auth,
            **({"oidc": {"issuer": "https://idp.example", "audience": "a"}} if auth == "oidc" else {}),
        },
    )
    spec = agent(conversations={"scope": agent_scope} if agent_scope else {})
    config = render_agent("research", spec, dep, {}, url="http://research.agents.svc:8000/mcp").config
    assert config.conversation_scope == scope
    assert config.conversations.abandoned_after_seconds == 604_800


def test_a_call_may_choose_every_model_the_deployment_declares_of_any_provider() -> None:
    dep = deployment(
        model={
            "default": "vllm.qwen3-8b",
            "models": {
                "vllm.qwen3-32b": {"contextWindow": 65536},
                "anthropic.claude-sonnet-4-5": {"vision": True},
            },
        }
    )
    own = render_agent("research", agent(), dep, {}).config
    assert [(m.choice, m.capabilities.context_window) for m in own.models] == [
        ("qwen3-32b", 65536),
        ("anthropic.claude-sonnet-4-5", 131072),
    ]
    # Another provider's model is named with its provider and carries that provider's config.
    assert own.offered_models == ["qwen3-8b", "qwen3-32b", "anthropic.claude-sonnet-4-5"]
    assert own.models[1].provider is not None
    assert own.models[1].provider.type == "anthropic"
    bigger = render_agent("research", agent(model="vllm.qwen3-32b"), dep, {}).config
    assert bigger.offered_models == ["qwen3-32b", "qwen3-8b", "anthropic.claude-sonnet-4-5"]
    claude = render_agent("research", agent(model="anthropic.claude-sonnet-4-5"), dep, {}).config
    assert claude.offered_models == ["claude-sonnet-4-5", "vllm.qwen3-8b", "vllm.qwen3-32b"]


def test_provider_api_and_credentials_are_rendered_and_checked() -> None:
    providers = {
        "oai": {"type": "openai", "api": "responses", "apiKey": {"secretKeyRef": {"name": "k", "key": "K"}}},
        "hf": {
            "type": "openai",
            "baseURL": "https://router.huggingface.co/v1",
            "credentials": "callerBearer",
        },
    }
    dep = deployment(model={"default": "oai.gpt-5"}, providers=providers)
    assert render_agent("research", agent(), dep, {}).config.provider.api == "responses"
    hf = render_agent("research", agent(model="hf.qwen3"), dep, {}).config.provider
    assert (hf.credentials, hf.api_key_env) == ("callerBearer", None)
    with pytest.raises(ValueError, match="api: responses is OpenAI's; a provider of type anthropic"):
        deployment(providers={"a": {"type": "anthropic", "api": "responses"}}, model={"default": "a.c"})
    with pytest.raises(ValueError, match="credentials: callerBearer sends the caller's token as the key"):
        deployment(
            providers={
                "hf": {
                    "type": "openai",
                    "credentials": "callerBearer",
                    "apiKey": {"secretKeyRef": {"name": "k", "key": "K"}},
                }
            },
            model={"default": "hf.x"},
        )


@pytest.mark.parametrize(
    ("model", "effort", "refusal"),
    [
        ("vllm.qwen3-8b", "max", "openai provider 'vllm' (model 'qwen3-8b'); it takes low, medium, high"),
        ("vllm.qwen3-8b", "xhigh", "openai provider 'vllm' (model 'qwen3-8b'); it takes low, medium, high"),
        ("vllm.qwen3-8b", "high", None),
        ("anthropic.claude-opus-4-5", "max", "(model 'claude-opus-4-5'); it takes low, medium, high"),
        ("anthropic.claude-opus-4-6", "max", None),
        ("anthropic.claude-opus-4-7", "xhigh", None),
        ("anthropic.claude-sonnet-4-5", "max", None),  # takes no effort at all: dropped, as before
    ],
)
def test_an_agents_effort_the_provider_does_not_take_is_refused_at_render(
    model: str, effort: str, refusal: str | None
) -> None:
    spec = agent(model=model, requestParams={"effort": effort})
    if refusal is None:
        render_agent("research", spec, deployment(), {})
        return
    with pytest.raises(RenderError, match=r"requestParams\.effort") as raised:
        render_agent("research", spec, deployment(), {})
    assert str(raised.value).startswith(f"requestParams.effort {effort!r} is not taken by ")
    assert str(raised.value).endswith(refusal)
    assert raised.value.reason == "InvalidSpec"


def test_anthropic_on_bedrock_is_rendered_with_its_region_and_checked() -> None:
    providers = {
        "bedrock": {
            "type": "anthropic",
            "platform": "bedrock",
            "region": "eu-central-1",
            "apiKey": {"secretKeyRef": {"name": "aws", "key": "BEDROCK_API_KEY"}},
        }
    }
    dep = deployment(model={"default": "bedrock.anthropic.claude-sonnet-4-6-v1:0"}, providers=providers)
    provider = render_agent("research", agent(), dep, {}).config.provider
    assert (provider.platform, provider.region, provider.api_key_env) == (
        "bedrock",
        "eu-central-1",
        "PALLAS_PROVIDER_BEDROCK_API_KEY",
    )
    with pytest.raises(ValueError, match="region is the cloud region of a bedrock or vertex provider"):
        deployment(providers={"b": {"type": "anthropic", "platform": "bedrock"}}, model={"default": "b.c"})
    vertex = {"type": "anthropic", "platform": "vertex", "region": "us-east5", "projectId": "pallas-prod"}
    dep = deployment(model={"default": "v.claude-sonnet-4-6@20260101"}, providers={"v": vertex})
    rendered = render_agent("research", agent(), dep, {}).config.provider
    assert (rendered.platform, rendered.region, rendered.project_id) == ("vertex", "us-east5", "pallas-prod")
    with pytest.raises(ValueError, match="projectId is the Google Cloud project of a vertex provider"):
        deployment(providers={"v": {**vertex, "projectId": None}}, model={"default": "v.c"})
    with pytest.raises(ValueError, match="platform: bedrock serves the Anthropic Messages API"):
        deployment(
            providers={"b": {"type": "openai", "platform": "bedrock", "region": "us-east-1"}},
            model={"default": "b.c"},
        )


def test_bedrock_converse_is_rendered_with_its_region_and_no_key_by_default() -> None:
    dep = deployment(
        model={"default": "aws.meta.llama3-3-70b-instruct-v1:0"},
        providers={"aws": {"type": "bedrock", "region": "us-east-1"}},
    )
    provider = render_agent("research", agent(), dep, {}).config.provider
    # No key variable: the agent signs with the pod's AWS credential chain.
    assert (provider.type, provider.region, provider.api_key_env) == ("bedrock", "us-east-1", None)
    with pytest.raises(ValueError, match="region is the cloud region"):
        deployment(providers={"b": {"type": "bedrock"}}, model={"default": "b.c"})
    with pytest.raises(ValueError, match="type: bedrock is Bedrock's own Converse API: it takes no platform"):
        deployment(
            providers={"b": {"type": "bedrock", "platform": "bedrock", "region": "us-east-1"}},
            model={"default": "b.c"},
        )
