"""Specs → one agent's runtime config. Pure: shared by the operator and `pallas run`.

Secret values never enter the config. Each secret is bound to a stable name (`SecretBinding`)
that the process looks its value up by (`pallas_io.secrets`): the operator projects each bound
Secret key into the pod's Secret volume as a file of that name, and `pallas run` fills
environment variables of that name from Secret manifests or the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pallas_api import names
from pallas_api.conditions import (
    ACCESS_NOT_ENFORCEABLE,
    AGENT_NOT_FOUND,
    INVALID_SPEC,
    PROVIDER_NOT_FOUND,
    SERVER_NOT_FOUND,
    STDIO_NOT_HOSTABLE,
)
from pallas_api.config import (
    A2AConfig,
    A2APeer,
    AccessConfig,
    AgentConfig,
    AuthConfig,
    ConversationStoreConfig,
    DownstreamServer,
    HeaderConfig,
    HealthSettings,
    HistoryLimits,
    KubernetesAuthConfig,
    ModelOption,
    OidcConfig,
    PeerAgent,
    ProviderConfig,
    ToolExposure,
)
from pallas_api.model_rules import effort_refusal
from pallas_api.spec import (
    ConversationsSpec,
    HeaderSpec,
    LogLevel,
    PallasAgentSpec,
    PallasDeploymentSpec,
    ProviderSpec,
    SecretKeyRef,
    TelemetrySpec,
    ToolExposureSpec,
)
from pallas_api.spending import BudgetConfig


class RenderError(Exception):
    """A reference in the specs that cannot be resolved.

    `reason` is a CamelCase condition reason; `missing` names what is missing.
    """

    def __init__(self, reason: str, message: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason
        self.missing = missing


@dataclass(frozen=True, slots=True)
class SecretBinding:
    """The agent process finds the value of `ref` under the name `env`.

    In a pod, the file `env` of its Secret volume; under `pallas run`, the environment variable.
    """

    env: str
    ref: SecretKeyRef


@dataclass(frozen=True, slots=True)
class RenderedAgent:
    """One agent's runtime config and the Secret keys its process reads, by the names it reads them."""

    config: AgentConfig
    secrets: tuple[SecretBinding, ...]


def env_name(*parts: str) -> str:
    """A stable environment variable name: `PALLAS_` + upper-cased parts joined by `_`."""
    return "PALLAS_" + "_".join(re.sub(r"[^A-Za-z0-9]", "_", p).upper() for p in parts)


def provider_key_env(provider: str) -> str:
    """The variable holding provider `provider`'s API key, in agent and registry pods alike."""
    return env_name("PROVIDER", provider, "API_KEY")


def provider_key_bindings(deployment: PallasDeploymentSpec) -> tuple[SecretBinding, ...]:
    """Every provider key of a deployment, for its registry (which checks them all)."""
    return tuple(
        SecretBinding(provider_key_env(name), spec.api_key.secret_key_ref)
        for name, spec in sorted(deployment.providers.items())
        if spec.api_key is not None
    )


def secret_source(ref: SecretKeyRef, *, local: bool) -> str:
    """Where a secret's value comes from, in the words of the manifest the user wrote.

    Messages about a missing value name this, never the `PALLAS_…` variable the renderer chose:
    in a pod the Secret and its key; under `pallas run` the environment variable to export (a
    Secret manifest in the files would have filled it).
    """
    if local:
        return f"environment variable {ref.key} (secretKeyRef {ref.name}/{ref.key})"
    return f"Secret {ref.name} key {ref.key}"


def log_level(deployment: PallasDeploymentSpec, agent: PallasAgentSpec | None = None) -> LogLevel:
    """The agent's `logLevel`, else its deployment's, else info (the registry: the deployment's)."""
    return (agent.log_level if agent is not None else None) or deployment.log_level or "info"


def drain_seconds(deployment: PallasDeploymentSpec, agent: PallasAgentSpec) -> int:
    """How long the agent's stopping pods let turns in flight finish: its own, else the deployment's."""
    own = agent.pod.drain_seconds
    return deployment.runtime.drain_seconds if own is None else own


def log_environment(level: LogLevel, *, namespace: str, deployment: str) -> dict[str, str]:
    """The logging knobs of a pod: JSON lines even with a tty, the level, what the lines concern.

    `PALLAS_LOG_FORMAT=json` is explicit, so `kubectl run -t` or a `tty: true` patch cannot turn
    a pod's lines into terminal output that log collectors cannot parse.
    """
    return {
        "PALLAS_LOG_FORMAT": "json",
        "PALLAS_LOG_LEVEL": level.upper(),
        "PALLAS_NAMESPACE": namespace,
        "PALLAS_DEPLOYMENT": deployment,
    }


def telemetry_environment(
    telemetry: TelemetrySpec, *, service: str, namespace: str, deployment: str
) -> dict[str, str]:
    """The standard `OTEL_*` variables of a pod (or of `pallas run`) from `spec.telemetry`.

    Empty without an endpoint: the process then loads no tracing SDK at all. Sampling is
    parent-based, so a call arriving in a sampled trace is recorded whatever the ratio.
    """
    if telemetry.endpoint is None:
        return {}
    attributes = {"pallas.deployment": deployment, **telemetry.resource_attributes}
    if namespace:
        attributes = {"k8s.namespace.name": namespace, **attributes}
    environment = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": telemetry.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": service,
        "OTEL_RESOURCE_ATTRIBUTES": ",".join(f"{k}={v}" for k, v in attributes.items()),
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{telemetry.sample_ratio:g}",
    }
    if telemetry.capture_content:
        environment["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    return environment


def with_default_telemetry(spec: PallasDeploymentSpec, default: TelemetrySpec) -> PallasDeploymentSpec:
    """`spec` with the operator's `default` telemetry when it names no endpoint of its own."""
    if spec.telemetry.endpoint is not None or default.endpoint is None:
        return spec
    return spec.model_copy(update={"telemetry": default})


def split_model(ref: str) -> tuple[str, str]:
    """`<provider>.<model>` → (provider, model); the model id may itself contain dots."""
    provider, _, model = ref.partition(".")
    return provider, model


def _tool_exposure(deployment: ToolExposureSpec, agent: ToolExposureSpec) -> ToolExposure:
    """The agent's fields over the deployment's, field by field, over the defaults."""
    chosen = {**deployment.model_dump(exclude_none=True), **agent.model_dump(exclude_none=True)}
    return ToolExposure.model_validate(chosen)


def _store(
    spec: ConversationsSpec,
    agent: PallasAgentSpec,
    identity: str,
    secrets: list[SecretBinding],
    *,
    local: bool,
) -> ConversationStoreConfig:
    store = spec.store or ("sqlite" if local else "memory")
    common = {
        "type": store,
        "ttl_seconds": spec.ttl_seconds,
        "scope": agent.conversations.scope or spec.scope,
        "agent_identity": identity,
        "abandoned_after_seconds": spec.abandoned_after_seconds,
    }
    if store != "postgres" or spec.postgres is None:
        return ConversationStoreConfig.model_validate(common)
    dsn_env = env_name("CONVERSATIONS", "DSN")
    secrets.append(SecretBinding(dsn_env, spec.postgres.dsn.secret_key_ref))
    return ConversationStoreConfig.model_validate(
        {
            **common,
            "dsn_env": dsn_env,
            "dsn_source": secret_source(spec.postgres.dsn.secret_key_ref, local=local),
            "max_connections": spec.postgres.max_connections,
        }
    )


def render_auth(
    agent: PallasAgentSpec, deployment: PallasDeploymentSpec, namespace: str, url: str | None
) -> AuthConfig:
    """The agent's auth settings: the deployment's mode, the agent's access lists, its URL.

    Raises:
        RenderError: `spec.access` names callers while the deployment authenticates nobody
            (the lists could not be enforced, and an agent that looks restricted must not be open).
    """
    auth = deployment.auth
    if auth.mode == "none":
        if agent.access.restricted:
            raise RenderError(
                ACCESS_NOT_ENFORCEABLE,
                "spec.access names allowed callers, but the deployment's spec.auth.mode is none, so "
                "no caller is identified: set spec.auth.mode to kubernetes or oidc, or remove spec.access",
            )
        return AuthConfig(namespace=namespace)
    oidc = None
    if auth.oidc is not None:
        oidc = OidcConfig(
            issuer=auth.oidc.issuer,
            audience=auth.oidc.audience,
            jwks_url=auth.oidc.jwks_url,
            subject_claim=auth.oidc.subject_claim,
            groups_claim=auth.oidc.groups_claim,
            algorithms=list(auth.oidc.algorithms),
        )
    return AuthConfig(
        mode=auth.mode,
        namespace=namespace,
        resource=url,
        kubernetes=KubernetesAuthConfig(
            audiences=list(auth.kubernetes.audiences), cache_seconds=auth.kubernetes.cache_seconds
        ),
        oidc=oidc,
        access=AccessConfig(subjects=list(agent.access.subjects), groups=list(agent.access.groups)),
    )


def _check_effort(agent: PallasAgentSpec, provider_name: str, provider: ProviderSpec, model: str) -> None:
    """Refuse a `requestParams.effort` value the agent's provider and model do not take."""
    effort = agent.request_params.effort
    if effort is None:
        return
    subject = f"{provider.type} provider {provider_name!r}"
    if (refusal := effort_refusal(effort, provider.type, provider.base_url, model, subject)) is not None:
        raise RenderError(INVALID_SPEC, f"requestParams.{refusal}")


def _headers(
    kind: str, source: str, specs: Sequence[HeaderSpec], secrets: list[SecretBinding], *, local: bool
) -> list[HeaderConfig]:
    """A source's headers for the runtime: literal values as given, Secret values by env var."""
    headers = []
    for index, header in enumerate(specs):
        if header.value_from is not None:
            var = env_name(kind, source, "HEADER", str(index))
            secrets.append(SecretBinding(var, header.value_from.secret_key_ref))
            origin = secret_source(header.value_from.secret_key_ref, local=local)
            headers.append(HeaderConfig(name=header.name, value_from_env=var, value_source=origin))
        else:
            headers.append(HeaderConfig(name=header.name, value=header.value))
    return headers


def render_agent(
    name: str,
    agent: PallasAgentSpec,
    deployment: PallasDeploymentSpec,
    agent_urls: Mapping[str, str],
    *,
    local: bool = False,
    namespace: str = "default",
    url: str | None = None,
    uid: str | None = None,
    stdio_urls: Mapping[str, str] | None = None,
) -> RenderedAgent:
    """Build the runtime config of agent `name`.

    Args:
        name: The PallasAgent's name.
        agent: Its spec.
        deployment: The spec of the PallasDeployment it belongs to.
        agent_urls: MCP URLs of the agents it may call, by name.
        local: For `pallas run` (the default store is SQLite) rather than a pod (memory).
        namespace: The agent's namespace (where its access is authorised).
        url: The agent's MCP URL as its callers use it (the protected resource); required when
            the deployment's auth mode is not `none`.
        uid: The PallasAgent's UID (in a cluster): a re-created agent keys new conversations.
        stdio_urls: Where the bridges of the deployment's stdio servers listen, by server name
            (`pallas run`'s); default: the Services the operator hosts them behind.

    Raises:
        RenderError: a model provider, server or agent that does not exist, access lists that
            cannot be enforced, or a stateful stdio server in a cluster.
    """
    auth = render_auth(agent, deployment, namespace, url)
    secrets: list[SecretBinding] = []
    model_ref = agent.model or deployment.model.default
    provider_name, model = split_model(model_ref)
    provider_spec = deployment.providers.get(provider_name)
    if provider_spec is None:
        raise RenderError(
            PROVIDER_NOT_FOUND,
            f"model {model_ref!r} names provider {provider_name!r}, which the deployment does not define",
            (provider_name,),
        )
    api_key_env = api_key_source = None
    if provider_spec.api_key is not None:
        api_key_env = provider_key_env(provider_name)
        api_key_source = secret_source(provider_spec.api_key.secret_key_ref, local=local)
        secrets.append(SecretBinding(api_key_env, provider_spec.api_key.secret_key_ref))
    provider = ProviderConfig(
        name=provider_name,
        type=provider_spec.type,
        base_url=provider_spec.base_url,
        api_key_env=api_key_env,
        api_key_source=api_key_source,
        timeout_seconds=provider_spec.timeout_seconds,
        max_retries=provider_spec.max_retries,
        streaming=provider_spec.capabilities.streaming is not False,
        api=provider_spec.api,
        credentials=provider_spec.credentials,
        platform=provider_spec.platform,
        region=provider_spec.region,
        project_id=provider_spec.project_id,
    )
    _check_effort(agent, provider_name, provider_spec, model)
    models = [
        ModelOption(model=split_model(ref)[1], capabilities=deployment.model.capabilities_of(ref))
        for ref in [deployment.model.default, *deployment.model.models]
        if split_model(ref)[0] == provider_name and ref != model_ref
    ]

    missing_servers = [s for s in agent.servers if s not in deployment.mcp_servers]
    if missing_servers:
        raise RenderError(
            SERVER_NOT_FOUND,
            f"mcpServers {', '.join(missing_servers)} not defined by the deployment",
            tuple(missing_servers),
        )
    servers = []
    for server_name in agent.servers:
        spec = deployment.mcp_servers[server_name]
        if spec.stdio is None:
            if spec.url is None:  # pragma: no cover - McpServerSpec._url_or_stdio refuses it
                raise AssertionError(f"mcpServers {server_name} has neither url nor stdio")
            server_url = spec.url
        else:
            if spec.stateful and stdio_urls is None:
                raise RenderError(
                    STDIO_NOT_HOSTABLE,
                    f"mcpServers {server_name} is a stateful stdio server: that needs a process per "
                    "session, which only `pallas run` hosts; in a cluster run it as an HTTP server "
                    "(url) or drop stateful",
                    (server_name,),
                )
            server_url = (stdio_urls or {}).get(server_name) or names.stdio_server_url(
                agent.deployment, server_name, namespace
            )
        headers = _headers("SERVER", server_name, spec.headers, secrets, local=local)
        servers.append(
            DownstreamServer(
                name=server_name,
                url=server_url,
                transport=spec.transport,
                headers=headers,
                forward_inbound_auth=spec.forward_inbound_auth,
                timeout_seconds=spec.timeout_seconds,
                max_result_bytes=spec.max_result_bytes,
                stateful=spec.stateful,
                sessions=spec.sessions,
                require_approval=spec.require_approval,
            )
        )

    missing_agents = [a for a in agent.agents if a not in agent_urls]
    if missing_agents:
        raise RenderError(
            AGENT_NOT_FOUND, f"agents {', '.join(missing_agents)} not found", tuple(missing_agents)
        )
    peers = [PeerAgent(name=peer, url=agent_urls[peer]) for peer in agent.agents]
    missing_a2a = [a for a in agent.a2a_agents if a not in deployment.a2a_agents]
    if missing_a2a:
        raise RenderError(
            AGENT_NOT_FOUND,
            f"a2aAgents {', '.join(missing_a2a)} not defined by the deployment",
            tuple(missing_a2a),
        )
    a2a_peers = []
    for peer_name in agent.a2a_agents:
        external = deployment.a2a_agents[peer_name]
        a2a_peers.append(
            A2APeer(
                name=peer_name,
                url=external.url,
                headers=_headers("A2A", peer_name, external.headers, secrets, local=local),
                forward_inbound_auth=external.forward_inbound_auth,
                timeout_seconds=external.timeout_seconds,
                max_result_bytes=external.max_result_bytes,
            )
        )

    config = AgentConfig(
        name=name,
        title=agent.title,
        description=agent.description,
        version=deployment.version,
        instruction=agent.instruction,
        model=model,
        provider=provider,
        capabilities=deployment.model.capabilities_of(model_ref),
        models=models,
        servers=servers,
        agents=peers,
        a2a_agents=a2a_peers,
        request_params=agent.request_params,
        call_params=agent.call_params,
        max_iterations=agent.max_iterations,
        max_depth=agent.max_depth,
        tools=agent.tools,
        tool_exposure=_tool_exposure(deployment.tool_exposure, agent.tool_exposure),
        history=HistoryLimits(
            max_messages=agent.history.max_messages
            or deployment.conversations.max_messages
            or HistoryLimits().max_messages,
            max_conversations=agent.history.max_conversations,
            max_bytes=agent.history.max_bytes,
        ),
        conversations=_store(
            deployment.conversations,
            agent,
            names.agent_identity(namespace, agent.deployment, name, uid),
            secrets,
            local=local,
        ),
        limits=agent.limits,
        health=HealthSettings(
            probe_timeout_seconds=deployment.health_check.timeout_seconds,
            slow_llm_seconds=deployment.health_check.slow_llm_seconds,
            slow_tool_seconds=deployment.health_check.slow_tool_seconds,
        ),
        auth=auth,
        sessions=agent.sessions,
        busy_at=agent.busy_at,
        http=deployment.http,
        drain_seconds=drain_seconds(deployment, agent),
        budgets=BudgetConfig.merged(deployment.budgets, agent.budgets),
        a2a=A2AConfig(
            enabled=agent.a2a.enabled,
            url=names.a2a_url(url) if url else None,
            tags=list(agent.capabilities),
        ),
    )
    return RenderedAgent(config, tuple(dict.fromkeys(secrets)))
