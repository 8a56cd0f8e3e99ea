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
from typing import Protocol, TypeVar

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
from pallas_api.references import Problem, agents_not_found, servers_not_found
from pallas_api.spec import (
    ConversationsSpec,
    HeaderSpec,
    LogLevel,
    McpServerSpec,
    OidcSpec,
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


Bindings = tuple[SecretBinding, ...]
"""The Secret keys one part of an agent's config reads, by the names it reads them."""


@dataclass(frozen=True, slots=True)
class RenderedAgent:
    """One agent's runtime config and the Secret keys its process reads, by the names it reads them."""

    config: AgentConfig
    secrets: tuple[SecretBinding, ...]

    @property
    def warning(self) -> Problem | None:
        """What the agent runs without (servers its deployment does not define), or None."""
        missing = self.config.missing_servers
        return servers_not_found(missing) if missing else None


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
    spec: ConversationsSpec, agent: PallasAgentSpec, identity: str, *, local: bool
) -> tuple[ConversationStoreConfig, Bindings]:
    """The agent's conversation store, and the binding of a database store's DSN."""
    store = spec.store or ("sqlite" if local else "memory")
    common = {
        "type": store,
        "ttl_seconds": spec.ttl_seconds,
        "scope": agent.conversations.scope or spec.scope,
        "agent_identity": identity,
        "abandoned_after_seconds": spec.abandoned_after_seconds,
        **({"task_ttl_seconds": spec.task_ttl_seconds} if spec.task_ttl_seconds is not None else {}),
    }
    if store != "postgres" or spec.postgres is None:
        return ConversationStoreConfig.model_validate(common), ()
    dsn_env = env_name("CONVERSATIONS", "DSN")
    dsn = spec.postgres.dsn.secret_key_ref
    config = ConversationStoreConfig.model_validate(
        {
            **common,
            "dsn_env": dsn_env,
            "dsn_source": secret_source(dsn, local=local),
            "max_connections": spec.postgres.max_connections,
        }
    )
    return config, (SecretBinding(dsn_env, dsn),)


def render_oidc(oidc: OidcSpec) -> OidcConfig:
    """`spec.auth.oidc` as a verifier takes it (the agent's, and the registry's fleet endpoint's)."""
    # The same fields under the same names: the spec's whole settings, none left behind.
    return OidcConfig.model_validate(oidc.model_dump(by_alias=True))


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
    oidc = render_oidc(auth.oidc) if auth.oidc is not None else None
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
    kind: str, source: str, specs: Sequence[HeaderSpec], *, local: bool
) -> tuple[list[HeaderConfig], Bindings]:
    """A source's headers for the runtime: literal values as given, Secret values by env var."""
    headers = []
    secrets = []
    for index, header in enumerate(specs):
        if header.value_from is not None:
            var = env_name(kind, source, "HEADER", str(index))
            secrets.append(SecretBinding(var, header.value_from.secret_key_ref))
            origin = secret_source(header.value_from.secret_key_ref, local=local)
            headers.append(HeaderConfig(name=header.name, value_from_env=var, value_source=origin))
        else:
            headers.append(HeaderConfig(name=header.name, value=header.value))
    return headers, tuple(secrets)


class _WithHeaders(Protocol):
    @property
    def headers(self) -> Sequence[HeaderSpec]: ...


Source = TypeVar("Source", bound=_WithHeaders)


def _sources(
    field: str,
    reason: str,
    kind: str,
    wanted: Sequence[str],
    defined: Mapping[str, Source],
    *,
    local: bool,
) -> tuple[list[tuple[str, Source, list[HeaderConfig]]], Bindings]:
    """Each source the agent uses: its name, its definition and its headers; and their secrets.

    The headers are the runtime's (`_headers`): secret values become bindings to env vars.

    Raises:
        RenderError: (`reason`) a source the deployment's `field` does not define.
    """
    missing = [name for name in wanted if name not in defined]
    if missing:
        raise RenderError(
            reason, f"{field} {', '.join(missing)} not defined by the deployment", tuple(missing)
        )
    used = []
    secrets: Bindings = ()
    for name in wanted:
        headers, header_secrets = _headers(kind, name, defined[name].headers, local=local)
        secrets += header_secrets
        used.append((name, defined[name], headers))
    return used, secrets


def _provider(
    model_ref: str, deployment: PallasDeploymentSpec, *, local: bool
) -> tuple[ProviderConfig, Bindings]:
    """The provider serving `model_ref` (`<provider>.<model>`), and the binding of its API key.

    Raises:
        RenderError: the deployment defines no provider of that name.
    """
    name, _ = split_model(model_ref)
    spec = deployment.providers.get(name)
    if spec is None:
        raise RenderError(
            PROVIDER_NOT_FOUND,
            f"model {model_ref!r} names provider {name!r}, which the deployment does not define",
            (name,),
        )
    api_key_env = api_key_source = None
    secrets: Bindings = ()
    if spec.api_key is not None:
        api_key_env = provider_key_env(name)
        api_key_source = secret_source(spec.api_key.secret_key_ref, local=local)
        secrets = (SecretBinding(api_key_env, spec.api_key.secret_key_ref),)
    return ProviderConfig(
        name=name,
        type=spec.type,
        base_url=spec.base_url,
        api_key_env=api_key_env,
        api_key_source=api_key_source,
        timeout_seconds=spec.timeout_seconds,
        max_retries=spec.max_retries,
        streaming=spec.capabilities.streaming is not False,
        api=spec.api,
        credentials=spec.credentials,
        platform=spec.platform,
        region=spec.region,
        project_id=spec.project_id,
    ), secrets


def _other_models(
    model_ref: str, deployment: PallasDeploymentSpec, *, local: bool
) -> tuple[list[ModelOption], Bindings]:
    """The models besides `model_ref` a call may choose, and the bindings of other providers' keys.

    Every model the deployment declares (`model.default` and `model.models`) is offered: those of
    the agent's own provider by their id, those of another provider with that provider's config
    (its key bound like the agent's own), so one agent may use models of several providers.
    """
    own = split_model(model_ref)[0]
    options: list[ModelOption] = []
    secrets: Bindings = ()
    for ref in dict.fromkeys([deployment.model.default, *deployment.model.models]):
        if ref == model_ref:
            continue
        name, model = split_model(ref)
        provider = None
        if name != own:
            provider, key = _provider(ref, deployment, local=local)
            secrets += tuple(binding for binding in key if binding not in secrets)
        options.append(
            ModelOption(model=model, capabilities=deployment.model.capabilities_of(ref), provider=provider)
        )
    return options, secrets


def _server_url(
    server: str, spec: McpServerSpec, deployment: str, namespace: str, stdio_urls: Mapping[str, str] | None
) -> str:
    """Where the agent reaches a server: its `url`, or for a stdio server the bridge hosting it.

    The bridge is `pallas run`'s (`stdio_urls`), else the Service the operator hosts it behind.

    Raises:
        RenderError: a stateful stdio server in a cluster (only `pallas run` hosts a process per
            session).
    """
    if spec.stdio is None:
        if spec.url is None:  # pragma: no cover - McpServerSpec._url_or_stdio refuses it
            raise AssertionError(f"mcpServers {server} has neither url nor stdio")
        return spec.url
    if spec.stateful and stdio_urls is None:
        raise RenderError(
            STDIO_NOT_HOSTABLE,
            f"mcpServers {server} is a stateful stdio server: that needs a process per "
            "session, which only `pallas run` hosts; in a cluster run it as an HTTP server "
            "(url) or drop stateful",
            (server,),
        )
    return (stdio_urls or {}).get(server) or names.stdio_server_url(deployment, server, namespace)


def bridge_token_binding(deployment: str) -> SecretBinding:
    """Where an agent finds its deployment's bridge credential: the Secret the operator keeps.

    Under `pallas run` the run makes the value itself (`names.BRIDGE_TOKEN_ENV`); no manifest
    or variable gives it.
    """
    ref = SecretKeyRef(name=names.bridge_token_secret_name(deployment), key=names.BRIDGE_TOKEN_KEY)
    return SecretBinding(names.BRIDGE_TOKEN_ENV, ref)


def _bridge_token_header(binding: SecretBinding, *, local: bool) -> HeaderConfig:
    origin = "the bridge credential pallas run makes" if local else secret_source(binding.ref, local=False)
    return HeaderConfig(name=names.BRIDGE_TOKEN_HEADER, value_from_env=binding.env, value_source=origin)


def _servers(
    agent: PallasAgentSpec,
    deployment: PallasDeploymentSpec,
    *,
    namespace: str,
    local: bool,
    stdio_urls: Mapping[str, str] | None,
) -> tuple[list[DownstreamServer], Bindings]:
    """The deployment's MCP servers the agent uses, and the bindings of their secret headers.

    A server the deployment does not define is left out (`RenderedAgent.warning` names it).

    Raises:
        RenderError: a stateful stdio server in a cluster.
    """
    defined = [s for s in agent.servers if s in deployment.mcp_servers]
    used, secrets = _sources(
        "mcpServers", SERVER_NOT_FOUND, "SERVER", defined, deployment.mcp_servers, local=local
    )
    servers = []
    for name, spec, headers in used:
        if spec.stdio is not None:  # hosted by the deployment: its bridge answers only its agents
            token = bridge_token_binding(agent.deployment)
            headers.append(_bridge_token_header(token, local=local))
            secrets += (token,)
        servers.append(
            DownstreamServer(
                name=name,
                url=_server_url(name, spec, agent.deployment, namespace, stdio_urls),
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
    return servers, secrets


def _peers(agent: PallasAgentSpec, agent_urls: Mapping[str, str]) -> list[PeerAgent]:
    """The PallasAgents the agent calls, at their URLs.

    Raises:
        RenderError: an agent without a URL, i.e. not among the namespace's PallasAgents (the same
            problem `check_references` reports).
    """
    missing = [peer for peer in agent.peers() if peer not in agent_urls]
    if missing:
        problem = agents_not_found(missing)
        raise RenderError(problem.reason, problem.message, tuple(missing))
    return [PeerAgent(name=peer, url=agent_urls[peer]) for peer in agent.peers()]


def _a2a_peers(
    agent: PallasAgentSpec, deployment: PallasDeploymentSpec, *, local: bool
) -> tuple[list[A2APeer], Bindings]:
    """The deployment's external A2A agents the agent calls, and the bindings of their secret headers.

    Raises:
        RenderError: an A2A agent the deployment does not define.
    """
    used, secrets = _sources(
        "a2aAgents", AGENT_NOT_FOUND, "A2A", agent.a2a_agents, deployment.a2a_agents, local=local
    )
    peers = []
    for name, external, headers in used:
        peers.append(
            A2APeer(
                name=name,
                url=external.url,
                headers=headers,
                forward_inbound_auth=external.forward_inbound_auth,
                timeout_seconds=external.timeout_seconds,
                max_result_bytes=external.max_result_bytes,
            )
        )
    return peers, secrets


def _history(agent: PallasAgentSpec, deployment: PallasDeploymentSpec) -> HistoryLimits:
    """The agent's history limits; `maxMessages` falls back to the deployment's, then the default."""
    return HistoryLimits(
        max_messages=agent.history.max_messages
        or deployment.conversations.max_messages
        or HistoryLimits().max_messages,
        max_conversations=agent.history.max_conversations,
        max_bytes=agent.history.max_bytes,
    )


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
        RenderError: a model provider or agent that does not exist, access lists that cannot be
            enforced, or a stateful stdio server in a cluster. A server that does not exist is
            not an error: the agent runs without it (`RenderedAgent.warning`).
    """
    # The parts in the order a user fixes them: who may call, the model, then what it calls.
    auth = render_auth(agent, deployment, namespace, url)
    model_ref = agent.model or deployment.model.default
    provider, provider_key = _provider(model_ref, deployment, local=local)
    model = split_model(model_ref)[1]
    _check_effort(agent, provider.name, deployment.providers[provider.name], model)
    models, model_keys = _other_models(model_ref, deployment, local=local)
    servers, server_headers = _servers(
        agent, deployment, namespace=namespace, local=local, stdio_urls=stdio_urls
    )
    peers = _peers(agent, agent_urls)
    a2a_peers, a2a_headers = _a2a_peers(agent, deployment, local=local)
    identity = names.agent_identity(namespace, agent.deployment, name, uid)
    store, store_dsn = _store(deployment.conversations, agent, identity, local=local)
    config = AgentConfig(
        name=name,
        title=agent.title,
        description=agent.description,
        version=deployment.version,
        name_prefix=deployment.registry.name_prefix,
        prompts=deployment.prompts,
        instruction=agent.instruction,
        model=model,
        provider=provider,
        capabilities=deployment.model.capabilities_of(model_ref),
        models=models,
        servers=servers,
        missing_servers=[s for s in agent.servers if s not in deployment.mcp_servers],
        agents=peers,
        a2a_agents=a2a_peers,
        workflow=agent.workflow,
        request_params=agent.request_params,
        call_params=agent.call_params,
        max_iterations=agent.max_iterations,
        max_depth=agent.max_depth,
        tools=agent.tools,
        tool_exposure=_tool_exposure(deployment.tool_exposure, agent.tool_exposure),
        history=_history(agent, deployment),
        conversations=store,
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
            enabled=agent.a2a.enabled, url=names.a2a_url(url) if url else None, tags=list(agent.capabilities)
        ),
    )
    secrets = (*provider_key, *model_keys, *server_headers, *a2a_headers, *store_dsn)
    return RenderedAgent(config, tuple(dict.fromkeys(secrets)))
