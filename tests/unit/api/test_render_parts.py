"""The parts `render_agent` assembles an agent's config from, each on its own: pure, specs in."""

from __future__ import annotations

import pytest

from pallas_api.conditions import AGENT_NOT_FOUND, PROVIDER_NOT_FOUND, SERVER_NOT_FOUND, STDIO_NOT_HOSTABLE
from pallas_api.references import Problem, check_references
from pallas_api.render import (
    RenderError,
    SecretBinding,
    _a2a_peers,
    _other_models,
    _peers,
    _provider,
    _server_url,
    _servers,
    render_agent,
)
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec, SecretKeyRef

KEY = {"secretKeyRef": {"name": "llm", "key": "VLLM_KEY"}}


def deployment(**overrides: object) -> PallasDeploymentSpec:
    data: dict[str, object] = {
        "model": {
            "default": "vllm.qwen3-8b",
            "models": {"vllm.qwen3-32b": {"contextWindow": 65536}, "anthropic.claude-sonnet-4-5": {}},
        },
        "providers": {
            "vllm": {"type": "openai", "baseURL": "http://vllm:8000/v1", "apiKey": KEY},
            "anthropic": {"type": "anthropic", "capabilities": {"streaming": False}},
        },
        "mcpServers": {
            "argos": {
                "url": "http://argos:8000/mcp",
                "headers": [
                    {"name": "X-Team", "value": "blue"},
                    {"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "argos", "key": "k"}}},
                ],
            },
            "shell": {"stdio": {"command": "uvx", "args": ["mcp-shell"]}},
            "browser": {"stdio": {"command": "npx"}, "stateful": True},
        },
        "a2aAgents": {
            "kagent": {
                "url": "http://kagent:8083/",
                "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "kagent", "key": "k"}}}],
            }
        },
    }
    data.update(overrides)
    return PallasDeploymentSpec.model_validate(data)


def agent(**overrides: object) -> PallasAgentSpec:
    data: dict[str, object] = {"deployment": "ouranos"}
    data.update(overrides)
    return PallasAgentSpec.model_validate(data)


def test_the_provider_is_the_model_refs_and_its_key_is_bound_by_a_stable_name() -> None:
    provider, secrets = _provider("vllm.qwen3-8b", deployment(), local=False)
    assert (provider.name, provider.type, provider.base_url) == ("vllm", "openai", "http://vllm:8000/v1")
    assert provider.api_key_env == "PALLAS_PROVIDER_VLLM_API_KEY"
    assert provider.api_key_source == "Secret llm key VLLM_KEY"
    key = SecretKeyRef(name="llm", key="VLLM_KEY")
    assert secrets == (SecretBinding("PALLAS_PROVIDER_VLLM_API_KEY", key),)


def test_a_provider_without_a_key_binds_nothing_and_keeps_its_streaming_choice() -> None:
    provider, secrets = _provider("anthropic.claude-sonnet-4-5", deployment(), local=True)
    assert (provider.api_key_env, provider.streaming, secrets) == (None, False, ())


def test_a_model_of_an_undefined_provider_is_refused_naming_it() -> None:
    with pytest.raises(RenderError) as raised:
        _provider("bedrock.titan", deployment(), local=False)
    assert (raised.value.reason, raised.value.missing) == (PROVIDER_NOT_FOUND, ("bedrock",))


def test_the_other_models_are_every_declared_one_another_providers_with_its_config() -> None:
    others, secrets = _other_models("vllm.qwen3-32b", deployment(), local=False)
    assert [(o.choice, o.capabilities.context_window) for o in others] == [
        ("qwen3-8b", 131072),
        ("anthropic.claude-sonnet-4-5", 131072),
    ]
    assert others[0].provider is None  # the agent's own provider serves it
    served = others[1].provider
    assert served is not None
    assert (served.name, served.type, served.streaming) == ("anthropic", "anthropic", False)
    assert secrets == ()  # that provider has no key


def test_another_providers_key_is_bound_for_the_calls_that_pick_its_models() -> None:
    others, secrets = _other_models("anthropic.claude-sonnet-4-5", deployment(), local=False)
    assert [o.choice for o in others] == ["vllm.qwen3-8b", "vllm.qwen3-32b"]
    assert {o.provider.api_key_env for o in others if o.provider} == {"PALLAS_PROVIDER_VLLM_API_KEY"}
    key = SecretKeyRef(name="llm", key="VLLM_KEY")
    assert secrets == (SecretBinding("PALLAS_PROVIDER_VLLM_API_KEY", key),)
    rendered = render_agent(
        "research", agent(model="anthropic.claude-sonnet-4-5"), deployment(), {}, namespace="ns"
    )
    assert [binding.env for binding in rendered.secrets] == ["PALLAS_PROVIDER_VLLM_API_KEY"]
    assert rendered.config.offered_models == ["claude-sonnet-4-5", "vllm.qwen3-8b", "vllm.qwen3-32b"]


def test_servers_keep_the_agents_order_and_bind_only_secret_headers() -> None:
    servers, secrets = _servers(
        agent(servers=["shell", "argos"]), deployment(), namespace="ns", local=False, stdio_urls=None
    )
    assert [s.name for s in servers] == ["shell", "argos"]
    argos = servers[1]
    assert [(h.name, h.value, h.value_from_env) for h in argos.headers] == [
        ("X-Team", "blue", None),
        ("X-Api-Key", None, "PALLAS_SERVER_ARGOS_HEADER_1"),
    ]
    # The stdio server is hosted by the deployment: its bridge takes the deployment's credential.
    assert [(h.name, h.value, h.value_from_env) for h in servers[0].headers] == [
        ("Pallas-Bridge-Token", None, "PALLAS_BRIDGE_TOKEN")
    ]
    assert secrets == (  # the servers' secret headers, then the bridge credential of the hosted ones
        SecretBinding("PALLAS_SERVER_ARGOS_HEADER_1", SecretKeyRef(name="argos", key="k")),
        SecretBinding("PALLAS_BRIDGE_TOKEN", SecretKeyRef(name="ouranos-bridge-token", key="token")),
    )


def test_an_undefined_server_is_left_out_and_the_agent_renders_with_a_warning_naming_it() -> None:
    """The gateway seed: a reference to an undefined server is a warning; the agent runs on the rest."""
    servers, _ = _servers(
        agent(servers=["argos", "nope"]), deployment(), namespace="ns", local=False, stdio_urls=None
    )
    assert [s.name for s in servers] == ["argos"]
    rendered = render_agent("research", agent(servers=["argos", "nope"]), deployment(), {})
    assert [s.name for s in rendered.config.servers] == ["argos"]
    assert rendered.config.missing_servers == ["nope"]
    assert rendered.warning == Problem(
        SERVER_NOT_FOUND, "mcpServers nope not defined by the deployment: the agent runs without them"
    )
    assert render_agent("research", agent(servers=["argos"]), deployment(), {}).warning is None


def test_a_url_server_is_reached_at_its_url() -> None:
    argos = deployment().mcp_servers["argos"]
    assert _server_url("argos", argos, "ouranos", "ns", None) == "http://argos:8000/mcp"


def test_a_stdio_server_is_reached_at_its_bridge_local_or_in_the_cluster() -> None:
    shell = deployment().mcp_servers["shell"]
    in_cluster = _server_url("shell", shell, "ouranos", "ns", None)
    assert in_cluster == "http://ouranos-mcp-shell.ns.svc.cluster.local:8000/mcp"  # the bridge's Service
    assert _server_url("shell", shell, "ouranos", "ns", {"shell": "http://127.0.0.1:4100/mcp"}) == (
        "http://127.0.0.1:4100/mcp"
    )


def test_a_stateful_stdio_server_is_hostable_only_by_pallas_run() -> None:
    browser = deployment().mcp_servers["browser"]
    with pytest.raises(RenderError) as raised:
        _server_url("browser", browser, "ouranos", "ns", None)
    assert (raised.value.reason, raised.value.missing) == (STDIO_NOT_HOSTABLE, ("browser",))
    local = _server_url("browser", browser, "ouranos", "ns", {"browser": "http://127.0.0.1:4101/mcp"})
    assert local == "http://127.0.0.1:4101/mcp"


def test_peers_are_reached_at_their_urls_in_the_agents_order() -> None:
    peers = _peers(agent(agents=["b", "a"]), {"a": "http://a/mcp", "b": "http://b/mcp"})
    assert [(p.name, p.url) for p in peers] == [("b", "http://b/mcp"), ("a", "http://a/mcp")]


def test_a_peer_without_a_url_is_the_reference_checks_problem_word_for_word() -> None:
    spec = agent(agents=["ghost", "phantom"])
    with pytest.raises(RenderError) as raised:
        _peers(spec, {})
    problem = check_references("research", spec, deployment(), {"research": ["ghost", "phantom"]}, {})
    assert problem is not None
    assert (raised.value.reason, str(raised.value)) == (problem.reason, problem.message)
    assert raised.value.reason == AGENT_NOT_FOUND
    assert raised.value.missing == ("ghost", "phantom")


def test_a2a_peers_bind_their_secret_headers() -> None:
    peers, secrets = _a2a_peers(agent(a2aAgents=["kagent"]), deployment(), local=True)
    assert [(p.name, p.url) for p in peers] == [("kagent", "http://kagent:8083/")]
    assert peers[0].headers[0].value_source == "environment variable k (secretKeyRef kagent/k)"
    assert secrets == (SecretBinding("PALLAS_A2A_KAGENT_HEADER_0", SecretKeyRef(name="kagent", key="k")),)


def test_an_undefined_a2a_agent_is_refused_naming_it() -> None:
    with pytest.raises(RenderError) as raised:
        _a2a_peers(agent(a2aAgents=["nope"]), deployment(), local=False)
    assert (raised.value.reason, raised.value.missing) == (AGENT_NOT_FOUND, ("nope",))


def test_the_assembly_binds_the_providers_key_then_the_servers_the_a2a_agents_and_the_store() -> None:
    dsn = {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    dep = deployment(conversations={"store": "postgres", "postgres": {"dsn": dsn}})
    rendered = render_agent(
        "research", agent(servers=["argos"], a2aAgents=["kagent"]), dep, {}, namespace="ns"
    )
    assert [binding.env for binding in rendered.secrets] == [
        "PALLAS_PROVIDER_VLLM_API_KEY",
        "PALLAS_SERVER_ARGOS_HEADER_1",
        "PALLAS_A2A_KAGENT_HEADER_0",
        "PALLAS_CONVERSATIONS_DSN",
    ]
    assert rendered.config.conversations.dsn_env == "PALLAS_CONVERSATIONS_DSN"
