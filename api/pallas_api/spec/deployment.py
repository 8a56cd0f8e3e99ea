"""The PallasDeployment spec: models, providers, servers, A2A agents, and what its agents share.

A deployment holds what its agents have in common: the model and its providers, the downstream
MCP servers and external A2A agents they may use, the registry, pod defaults, conversations,
auth, network isolation, telemetry and budgets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from pallas_api.approval import ApprovalPolicy
from pallas_api.fields import (
    CLOUD_REGION,
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESULT_BYTES,
    ENV_VAR_NAME,
    GCP_PROJECT,
    HTTP_URL,
    ONCE,
    SERVER_NAME,
    SET,
    ConversationScope,
    DrainSeconds,
    HttpLimits,
    MaxConnections,
    MaxResultBytes,
    ModelCapabilities,
    ProviderApi,
    ProviderCredentials,
    ProviderPlatform,
    ServerSessionLimits,
    StoreType,
    TaskTtl,
)
from pallas_api.names import DNS_LABEL
from pallas_api.spec.common import (
    DURATION,
    MODEL_REF,
    OPTIONAL_HTTP_URL,
    REVERSE_DNS,
    EnvVar,
    HeaderSpec,
    LabelSelector,
    LogLevel,
    ResourceRequirements,
    ScalingSpec,
    SecretSource,
    SpecModel,
    ToolExposureSpec,
)
from pallas_api.spending import BudgetsSpec
from pallas_api.urls import (
    COLLECTOR,
    PUBLIC_KEYS,
    PUBLISHED,
    SECRET_API_KEY,
    SECRET_HEADER,
    WithoutCredentials,
)

UNDECLARED_MODEL = ModelCapabilities()
"""What a model that neither `model.capabilities` nor `model.models` describes is taken to do."""


class ModelSpec(SpecModel):
    """The deployment's default model, and what each model its agents use can do."""

    default: Annotated[str, Field(pattern=MODEL_REF, max_length=253)]
    """Default model of every agent, as `<provider>.<model>`."""
    capabilities: ModelCapabilities = ModelCapabilities()
    """Capabilities of the default model, published in the registry and enforced (vision on
    input; maxOutputTokens bounds maxTokens)."""
    models: Annotated[dict[str, ModelCapabilities], Field(max_length=64)] = Field(default_factory=dict)
    """Capabilities of the other models agents choose with `spec.model`, by `<provider>.<model>`,
    e.g. `{anthropic.claude-sonnet-4-5: {vision: true, contextWindow: 200000, maxOutputTokens:
    64000}}`. An agent gets its own model's capabilities; a model listed nowhere gets the
    defaults (vision false, contextWindow 131072, maxOutputTokens 16384)."""

    def capabilities_of(self, model_ref: str) -> ModelCapabilities:
        """What the model `<provider>.<model>` can do, as declared here (else the defaults)."""
        if model_ref == self.default:
            return self.capabilities
        return self.models.get(model_ref, UNDECLARED_MODEL)

    @model_validator(mode="after")
    def _model_refs(self) -> Self:
        for ref in self.models:
            if not re.fullmatch(MODEL_REF, ref) or len(ref) > 253:
                raise ValueError(f"model.models key {ref!r} must be '<provider>.<model>', e.g. vllm.qwen3-8b")
        if self.default in self.models:
            raise ValueError(
                f"model.models names the default model {self.default!r}: its capabilities are "
                "model.capabilities; remove it from model.models"
            )
        return self


class ProviderCapabilities(SpecModel):
    """What a provider offers, as clients discovering it read it (the registry's provider entries).

    Unset values are the wire protocol's: streaming and tools for both, JSON mode for `openai`
    (Chat Completions `response_format`) and not for `anthropic`, vision as the agent's model.
    """

    streaming: bool | None = None
    """Streams completions."""
    tools: bool | None = None
    """Calls tools (function calling)."""
    vision: bool | None = None
    """Accepts images; default: the `vision` capability of the agent's model."""
    json_mode: bool | None = None
    """Constrains output to JSON."""


class ProviderSpec(SpecModel):
    """An LLM endpoint."""

    type: Literal["openai", "anthropic", "gemini", "bedrock"]
    """Wire protocol: `openai` (Chat Completions: OpenAI, vLLM, llama.cpp, LiteLLM, Ollama…),
    `anthropic` (Messages), `gemini` (the Gemini API's generateContent) or `bedrock` (Amazon
    Bedrock's Converse API in `region`, for every Bedrock model family: Anthropic, Llama, Mistral,
    Nova, …; model ids are Bedrock's, e.g. `meta.llama3-3-70b-instruct-v1:0` or an inference
    profile such as `us.amazon.nova-pro-v1:0`). A `bedrock` provider without `apiKey` signs its
    requests with SigV4 using the standard AWS credential chain of the agent's pod (IRSA web
    identity, EKS Pod Identity, the instance role, or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`);
    with `apiKey` (a Bedrock API key) it sends that as a bearer token."""
    base_url: Annotated[
        str | None,
        Field(alias="baseURL", pattern=HTTP_URL, max_length=2048),
        WithoutCredentials(SECRET_API_KEY),
    ] = None
    """Endpoint base URL, e.g. `http://vllm.llm.svc:8000/v1`; default: the vendor's public API."""
    api_key: SecretSource | None = None
    """API key, by Secret reference. Optional for local OpenAI-compatible servers."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    """Timeout of one model request."""
    max_retries: Annotated[int, Field(ge=0, le=10)] = 3
    """Retries with backoff on 429, 5xx and connection errors."""
    display_name: Annotated[str, Field(max_length=100)] = ""
    """Name clients show, e.g. `OpenAI`; default: the vendor's name when `baseURL` is unset (its
    public API), else the provider's key."""
    description: Annotated[str, Field(max_length=300)] = ""
    """What this endpoint is, for clients choosing between providers."""
    capabilities: ProviderCapabilities = ProviderCapabilities()
    """What the provider offers, published in the registry."""
    api: ProviderApi = "chat"
    """For `type: openai`, the API spoken: `chat` (Chat Completions, what every
    OpenAI-compatible server serves) or `responses` (OpenAI's Responses API, its reasoning
    models' own: `POST {baseURL}/responses`)."""
    platform: ProviderPlatform = "direct"
    """For `type: anthropic`, where the Messages API is served: `direct` (Anthropic's API, or
    `baseURL`), `bedrock` (Amazon Bedrock's runtime in `region`, through the anthropic SDK's
    Bedrock client; `apiKey` is a Bedrock API key, sent as a bearer token; model ids are
    Bedrock's, e.g. `anthropic.claude-sonnet-4-5-20250929-v1:0`) or `vertex` (Vertex AI in
    `region` and `projectId`, through the SDK's Vertex client; model ids are Vertex's, e.g.
    `claude-sonnet-4-5@20250929`). For `type: gemini`: `direct` (the Gemini API, `apiKey` a
    Gemini API key) or `vertex` (the same format at Vertex AI's endpoint in `region` and
    `projectId`; model ids as Vertex names them, e.g. `gemini-3-pro-preview`)."""
    region: Annotated[str | None, Field(pattern=CLOUD_REGION, max_length=32)] = None
    """The cloud region of a `bedrock` provider (e.g. `eu-central-1`) or a `vertex` one (e.g.
    `us-east5`, `global`); required there."""
    project_id: Annotated[str | None, Field(pattern=GCP_PROJECT)] = None
    """The Google Cloud project of a `vertex` provider (required there). Its `apiKey` is an OAuth
    access token (`gcloud auth print-access-token`, or one a token refresher writes into the
    Secret: agents read the key anew for each turn)."""
    credentials: ProviderCredentials = "apiKey"
    """Where the key sent to the provider comes from: `apiKey` (the Secret in `apiKey`, or none
    for a local server) or `callerBearer`: the bearer token each `send_message` call came with
    is the key, for that call only (Hugging Face-style endpoints where each user pays with their
    own token). A call without a bearer token is refused; the token is never logged nor kept
    across calls."""

    @model_validator(mode="after")
    def _api_and_credentials(self) -> Self:
        if self.api == "responses" and self.type != "openai":
            raise ValueError(f"api: responses is OpenAI's; a provider of type {self.type} speaks its own API")
        if self.type == "bedrock" and self.platform != "direct":
            raise ValueError("type: bedrock is Bedrock's own Converse API: it takes no platform")
        cloud = self.platform in ("bedrock", "vertex") or self.type == "bedrock"
        if self.platform == "bedrock" and self.type != "anthropic":
            raise ValueError("platform: bedrock serves the Anthropic Messages API: it needs type: anthropic")
        if self.platform == "vertex" and self.type == "openai":
            raise ValueError(
                "platform: vertex serves the Messages API or Gemini's: it needs type: anthropic or gemini"
            )
        if cloud != (self.region is not None):
            raise ValueError(
                "region is the cloud region of a bedrock or vertex provider (or of type: bedrock), "
                "and it needs one"
            )
        if (self.platform == "vertex") != (self.project_id is not None):
            raise ValueError("projectId is the Google Cloud project of a vertex provider, and it needs one")
        if self.credentials == "callerBearer" and self.api_key is not None:
            raise ValueError("credentials: callerBearer sends the caller's token as the key; remove apiKey")
        return self


class StdioEnvVar(SpecModel):
    """An environment variable of a stdio server's process."""

    name: Annotated[str, Field(pattern=ENV_VAR_NAME, max_length=256)]
    """Variable name."""
    value: Annotated[str | None, Field(max_length=32768)] = None
    """Literal value (not for secrets)."""
    value_from: SecretSource | None = None
    """Value from a Secret."""

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name!r} needs exactly one of value or valueFrom")
        return self


class StdioSpec(SpecModel):
    """A downstream MCP server that speaks MCP over its standard input and output: a command.

    Agents never talk stdio themselves: Pallas hosts the command behind a bridge speaking
    Streamable HTTP, and the agents reach the bridge like any other server (docs/api.md §1,
    "stdio servers").
    """

    command: Annotated[str, Field(min_length=1, max_length=4096)]
    """The program, e.g. `npx`, `uvx` or `/usr/local/bin/server`, looked up on `PATH`."""
    args: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(max_length=256)] = Field(
        default_factory=list
    )
    """Its arguments, e.g. `[-y, "@modelcontextprotocol/server-everything", stdio]`."""
    env: Annotated[list[StdioEnvVar], Field(max_length=64)] = Field(default_factory=list)
    """Environment variables of the process (besides `PATH`, `HOME` and the few a process needs)."""
    image: Annotated[str, Field(max_length=1024)] = ""
    """In a cluster: the container image holding the command (it needs `/bin/sh`); `pallas run`
    runs the command on the machine and ignores it. Default: the deployment's runtime image."""
    resources: ResourceRequirements | None = None
    """In a cluster: the resources of the server's container."""


class McpServerSpec(SpecModel):
    """A downstream MCP server agents of the deployment may use: a `url`, or a `stdio` command."""

    url: Annotated[
        str | None, Field(pattern=HTTP_URL, max_length=2048), WithoutCredentials(SECRET_HEADER)
    ] = None
    """MCP endpoint URL (credentials go in `headers`, never in the URL)."""
    stdio: StdioSpec | None = None
    """A command speaking MCP over stdio instead of a URL; Pallas hosts it behind a bridge."""
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    """MCP transport of a `url` server."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    """Timeout of one tool call."""
    forward_inbound_auth: bool = False
    """Forward the caller's Authorization header on each call (an explicit header wins)."""
    headers: Annotated[list[HeaderSpec], Field(max_length=32)] = Field(default_factory=list)
    """Headers sent on every request."""
    max_result_bytes: MaxResultBytes = DEFAULT_MAX_RESULT_BYTES
    """The largest tool result read from this server (64 KiB to 64 MiB); larger is a tool error."""
    stateful: bool = False
    """The server keeps state per MCP session (a shell's working directory, a browser page): each
    caller conversation gets a session of its own, never shared with another caller or another
    conversation. Default false: calls without a forwarded bearer share one session."""
    sessions: ServerSessionLimits = ServerSessionLimits()
    """With `stateful`: sessions each agent pod keeps to this server, `maxSessions` (default 32,
    the one unused longest is closed to make room) and `idleTimeoutSeconds` (default 1800)."""
    require_approval: ApprovalPolicy | None = None
    """Calls of these tools wait for the caller's yes, asked through MCP elicitation: `tools` (globs
    over tool names), `destructiveHint` (default true: also the tools the server annotates as
    destructive) and `timeoutSeconds` (default 120). Absent: no call waits."""

    @model_validator(mode="after")
    def _url_or_stdio(self) -> Self:
        if (self.url is None) == (self.stdio is None):
            raise ValueError("an MCP server needs exactly one of url (an HTTP server) or stdio (a command)")
        if self.stdio is not None and (
            self.headers or self.forward_inbound_auth or self.transport != "streamable-http"
        ):
            raise ValueError(
                "a stdio server takes no headers, forwardInboundAuth or transport: agents reach it "
                "through Pallas's bridge (give the command its credentials in stdio.env)"
            )
        return self


class A2AAgentSpec(SpecModel):
    """An external A2A agent (kagent, Ark, ADK…) the deployment's agents may call by name."""

    url: Annotated[str, Field(pattern=HTTP_URL, max_length=2048), WithoutCredentials(SECRET_HEADER)]
    """Where its Agent Card is: the card's own URL (`…/.well-known/agent-card.json`) or the base
    URL it is served under. The card names the JSON-RPC endpoint called."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 600.0
    """Timeout of one message to it (its whole task, streamed or not)."""
    forward_inbound_auth: bool = False
    """Forward the caller's Authorization header on each call (an explicit header wins). Off:
    an external agent is outside the deployment's trust boundary."""
    headers: Annotated[list[HeaderSpec], Field(max_length=32)] = Field(default_factory=list)
    """Headers sent on every request (an API key from a Secret: `valueFrom.secretKeyRef`)."""
    max_result_bytes: MaxResultBytes = DEFAULT_MAX_RESULT_BYTES
    """The largest answer read from it (64 KiB to 64 MiB); larger is a tool error."""


class RegistrySpec(SpecModel):
    """The catalogue Service of the deployment."""

    enabled: bool = True
    """Run the registry."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    """Service port of the registry."""
    name_prefix: Annotated[str | None, Field(pattern=REVERSE_DNS, max_length=200)] = None
    """Reverse-DNS part of each server.name; default derived from the namespace."""
    public_url_template: Annotated[
        str, Field(alias="publicURLTemplate", max_length=2048), WithoutCredentials(PUBLISHED)
    ] = ""
    """Public agent URL, e.g. `https://{deployment}.example.com/{agent}/mcp` (`{namespace}` too);
    default: cluster DNS."""
    public_url: Annotated[
        str,
        Field(alias="publicURL", pattern=OPTIONAL_HTTP_URL, max_length=2048),
        WithoutCredentials(PUBLISHED),
    ] = ""
    """The registry's URL as clients reach it, e.g. `https://agents.example.com/pallas/`; relative
    icon `src` values resolve against it. Default: its cluster URL."""


class PostgresSpec(SpecModel):
    """A PostgreSQL database for conversations."""

    dsn: SecretSource
    """The connection string (`postgresql://user:password@host:5432/db`), from a Secret."""
    max_connections: MaxConnections = DEFAULT_MAX_CONNECTIONS
    """Connections each agent pod opens at most: one pool for all its conversation work (turns,
    reads, migrations, the TTL sweep, health checks). Keep agents times replicas times this below the
    server's `max_connections`; work beyond it waits a few seconds for a free connection, then
    fails with a clear error."""


class ConversationsSpec(SpecModel):
    """Where the deployment's agents keep conversations (docs/api.md §3)."""

    store: StoreType | None = None
    """`memory` (lost when a pod restarts; not shared by replicas), `sqlite` (a file in the pod's
    writable /tmp, or `pallas run`'s state directory), `postgres` (shared by every replica and
    surviving restarts). Default: memory in a cluster, sqlite for `pallas run`."""
    postgres: PostgresSpec | None = None
    """The database, for `store: postgres`."""
    max_messages: Annotated[int | None, Field(gt=0, le=100_000)] = None
    """Messages kept per conversation unless an agent's `history.maxMessages` says otherwise
    (default 200)."""
    ttl_seconds: Annotated[int | None, Field(gt=0)] = None
    """Conversations untouched this long are deleted; default: kept."""
    task_ttl_seconds: TaskTtl | None = None
    """How long a finished MCP task (a `send_message` a 2026-07-28 client ran as a task) keeps its
    status and result for `tasks/get`; default 3600 (an hour), at most a week. Tasks are kept in
    the store: with `postgres` every replica answers `tasks/get`, with `memory` only the pod that
    ran the turn."""
    scope: ConversationScope | None = None
    """What a `send_message` without `conversation_id` continues (the original Pallas's
    `instance_scope`): `caller` — each caller's one default conversation, across sessions,
    reconnects and restarts; `session` — the MCP session's own; `request` — nothing is kept.
    Default: `caller` when `auth.mode` identifies callers, `session` when it is `none`. `caller`
    without auth makes every client one caller sharing one conversation: only for a deliberately
    single-user agent (docs/api.md §3). An agent's `conversations.scope` overrides it."""
    abandoned_after_seconds: Annotated[int | None, Field(ge=3600)] = 604_800
    """A database store deletes the conversations of an agent that has not run for this long (it
    was deleted, or scaled to zero that long); null keeps them. A re-created agent starts empty
    and its predecessor's conversations go at once. Default: 7 days."""
    retain_after_delete_seconds: Annotated[int | None, Field(ge=0, le=31_536_000)] = 0
    """`store: postgres`: how long a deleted PallasAgent's conversations are kept. 0 deletes
    them with the agent (its finalizer runs `pallas conversations purge` in a Job before the
    agent goes); N keeps them N seconds more, after which any agent on the database deletes
    them; null keeps them until `abandonedAfterSeconds` (no finalizer). Memory and SQLite stores
    live in the agent's pods, so their conversations go with the pods (docs/operator.md
    "Deleting an agent"). Default: 0."""

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> Self:
        if self.store == "postgres" and self.postgres is None:
            raise ValueError("conversations.store postgres needs conversations.postgres.dsn (a secretKeyRef)")
        return self


NODE_FAILURE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
"""The NoExecute taints the node lifecycle controller puts on a node that stops reporting."""
DEFAULT_NODE_FAILURE_SECONDS = 30
"""How long a pod tolerates `NODE_FAILURE_TAINTS` by default (the operator's
`--node-failure-toleration-seconds`): Kubernetes' default of 300 s would leave a failed node's
agents unreplaced for five minutes after the node is noticed as gone."""
NodeFailureSeconds = Annotated[int, Field(ge=0, le=3600)]


class AgentsServiceAccountSpec(SpecModel):
    """The identity of the deployment's agent pods towards the cloud (IRSA, Pod Identity, GKE)."""

    annotations: Annotated[dict[str, str], Field(max_length=32)] = Field(default_factory=dict)
    """Annotations of the agents' ServiceAccount `<deployment>-agents`, e.g.
    `eks.amazonaws.com/role-arn` (IRSA) or `iam.gke.io/gcp-service-account` (GKE Workload
    Identity), so a `bedrock` or Vertex provider gets its credentials from the cloud's identity of
    the pod instead of a key in a Secret. When set, the operator creates that ServiceAccount (it
    does so anyway under `auth.mode: kubernetes`) and the agent pods run as it; they mount no API
    token unless `auth.mode` is `kubernetes` (the clouds' webhooks inject their own)."""


class RuntimeSpec(SpecModel):
    """Pod defaults for every agent of the deployment."""

    image: str = ""
    """Runtime image; default: the operator's own runtime image."""
    resources: ResourceRequirements | None = None
    """Container resources; default: the operator's defaults."""
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)
    """Extra environment variables (Kubernetes EnvVar objects)."""
    drain_seconds: DrainSeconds = DEFAULT_DRAIN_SECONDS
    """Seconds a stopping agent pod (a rollout, a scale-down, a deleted pod) lets its turns in
    flight finish, 0 to 3600 (default 120). Meanwhile it is not ready and refuses new MCP
    sessions (503, retryable); turns still running after it are interrupted and kept in their
    conversations as failed (AGENT_SHUTTING_DOWN). The pods' terminationGracePeriodSeconds is
    this plus the preStop pause and a margin (docs/operator.md)."""
    node_failure_toleration_seconds: NodeFailureSeconds | None = None
    """Seconds the agent and registry pods stay bound to a node that stopped reporting
    (`node.kubernetes.io/unreachable` or `not-ready`, NoExecute) before they are evicted and
    replaced elsewhere, 0 to 3600. Default: the operator's `--node-failure-toleration-seconds`
    (30); Kubernetes' own default would be 300. A pod toleration of your own for either taint
    (`pod.tolerations`) replaces this one for that taint."""
    service_account: AgentsServiceAccountSpec = AgentsServiceAccountSpec()
    """The agents' ServiceAccount: its annotations (cloud workload identity)."""


class HealthCheckSpec(SpecModel):
    """How the operator checks agents."""

    interval_seconds: Annotated[int, Field(ge=5, le=86400)] = 60
    """Seconds between get_health calls by the operator."""
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 3.0
    """Timeout of each downstream probe inside get_health."""
    slow_llm_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    """An agent whose recent LLM calls (the last 20 within 10 minutes, at least 3) take longer
    than this on average reports itself `degraded`, naming the figure."""
    slow_tool_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    """The same for each downstream server and peer agent, by its recent tool calls."""


class ServiceMonitorSpec(SpecModel):
    """A Prometheus Operator ServiceMonitor for agents and registry."""

    enabled: bool = False
    """Create ServiceMonitors (needs the monitoring.coreos.com CRD)."""
    interval: Annotated[str, Field(pattern=DURATION)] = "30s"
    """Scrape interval."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels, e.g. the one your Prometheus selects ServiceMonitors by."""


class MonitoringSpec(SpecModel):
    """Monitoring integration."""

    service_monitor: ServiceMonitorSpec = ServiceMonitorSpec()
    """ServiceMonitor settings."""


RESOURCE_ATTRIBUTE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class TelemetrySpec(SpecModel):
    """Traces of the agents and the registry (OpenTelemetry, docs/api.md §5, Traces).

    Rendered into each pod as the standard `OTEL_*` variables; a pod's own `env` entries of the
    same names win.
    """

    endpoint: Annotated[
        str | None, Field(pattern=HTTP_URL, max_length=2048), WithoutCredentials(COLLECTOR)
    ] = None
    """Base URL of an OTLP/HTTP receiver (a collector, Jaeger, Tempo…), e.g.
    `http://otel-collector.observability:4318`; spans go to `<endpoint>/v1/traces`. Unset: no traces."""
    sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0
    """Share of the traces started here that are kept (parent-based: a call that arrives in a
    sampled trace is always recorded, so a trace is never cut in half). Default 1."""
    capture_content: bool = False
    """Put prompts, answers and tool arguments on the spans (the GenAI conventions' opt-in), scrubbed
    of the agents' secrets. They carry users' data: default false."""
    resource_attributes: Annotated[
        dict[str, Annotated[str, Field(max_length=256)]],
        Field(max_length=32),
    ] = Field(default_factory=dict)
    """Extra resource attributes of every span (`deployment.environment.name: prod`), after
    `service.name` (the agent's name), `k8s.namespace.name` and `pallas.deployment`."""

    @model_validator(mode="after")
    def _plain_attribute_values(self) -> Self:
        for key, value in self.resource_attributes.items():
            if not RESOURCE_ATTRIBUTE_KEY.match(key):
                raise ValueError(
                    f"telemetry.resourceAttributes: key {key!r} is not 1-128 letters, digits, '_', '.' or '-'"
                )
            if any(c in value for c in ",=\n"):
                raise ValueError(
                    f"telemetry.resourceAttributes[{key}]: a value may not contain ',' '=' or a newline"
                )
        return self


AuthMode = Literal["none", "kubernetes", "oidc"]
JwtAlgorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]
"""Asymmetric JWS algorithms an issuer may sign with. `none` and the HMAC family never verify:
an agent holds no shared secret, and `alg: none` is not a signature."""
CLAIM_NAME = r"^[A-Za-z0-9_:./-]+$"


class KubernetesAuthSpec(SpecModel):
    """How agents check Kubernetes tokens (`mode: kubernetes`)."""

    audiences: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]],
        Field(max_length=8),
        SET,
        ONCE,
    ] = Field(default_factory=list)
    """Audiences a caller's token must be issued for (TokenReview `spec.audiences`). Empty: the
    API server's own, so any token kubectl would accept. A dedicated audience (e.g. `pallas.dev`,
    tokens from `kubectl create token SA --audience pallas.dev`) keeps the tokens callers send to
    agents useless against the API server."""
    cache_seconds: Annotated[int, Field(ge=0, le=300)] = 10
    """Seconds an allow or deny decision is reused for the same token (0: ask every time)."""


class OidcSpec(SpecModel):
    """The OpenID Connect issuer whose JWTs agents accept (`mode: oidc`)."""

    issuer: Annotated[str, Field(pattern=HTTP_URL, max_length=2048), WithoutCredentials(PUBLIC_KEYS)]
    """Issuer URL; a token's `iss` must equal it exactly."""
    audience: Annotated[str, Field(min_length=1, max_length=2048)]
    """A token's `aud` must contain it (the client id or API identifier registered at the issuer)."""
    jwks_url: Annotated[
        str | None, Field(alias="jwksURL", pattern=HTTP_URL, max_length=2048), WithoutCredentials(PUBLIC_KEYS)
    ] = None
    """Where the issuer publishes its signing keys; default: `jwks_uri` of the issuer's
    `/.well-known/openid-configuration`."""
    subject_claim: Annotated[str, Field(pattern=CLAIM_NAME, max_length=128)] = "sub"
    """Claim naming the caller (matched against `PallasAgent.spec.access.subjects`)."""
    groups_claim: Annotated[str, Field(pattern=CLAIM_NAME, max_length=128)] = "groups"
    """Claim listing the caller's groups (matched against `spec.access.groups`)."""
    algorithms: Annotated[
        list[JwtAlgorithm],
        Field(min_length=1, max_length=10),
        SET,
        ONCE,
    ] = Field(default_factory=lambda: list[JwtAlgorithm](["RS256"]))
    """Signature algorithms accepted (asymmetric only)."""


class AuthSpec(SpecModel):
    """Who may talk to the deployment's agents."""

    mode: AuthMode = "none"
    """`none` (anyone who reaches an agent), `kubernetes` (a Kubernetes token, authorised by RBAC
    verb `invoke` on `pallasagents`) or `oidc` (a JWT of `oidc.issuer`)."""
    kubernetes: KubernetesAuthSpec = KubernetesAuthSpec()
    """Settings of `mode: kubernetes`."""
    oidc: OidcSpec | None = None
    """Settings of `mode: oidc` (required there, refused otherwise)."""

    @model_validator(mode="after")
    def _oidc_settings(self) -> Self:
        if self.mode == "oidc" and self.oidc is None:
            raise ValueError("auth.mode oidc needs auth.oidc (issuer and audience)")
        if self.mode != "oidc" and self.oidc is not None:
            raise ValueError(f"auth.oidc is only used with auth.mode oidc (mode is {self.mode})")
        return self


@dataclass(frozen=True, slots=True)
class CallerAuth:
    """What a caller must present to talk to a deployment's agents: `spec.auth` reduced to it.

    The one flat projection of `spec.auth`, for what compares and hashes it: the registry
    publishes it in each agent's catalogue entry, the operator's prober authenticates by it.
    Only the settings of `mode` are kept (the other mode's are empty); the agent-side settings
    (claims, algorithms, cache) are the agents' business and left out.
    """

    mode: AuthMode = "none"
    issuer: str = ""
    """oidc: the issuer whose tokens the agents accept."""
    audience: str = ""
    """oidc: the audience those tokens must carry."""
    audiences: tuple[str, ...] = ()
    """kubernetes: the token audiences the agents accept (empty: the API server's)."""

    @classmethod
    def of(cls, auth: AuthSpec) -> CallerAuth:
        """The projection of a deployment's `spec.auth`."""
        if auth.mode == "oidc" and auth.oidc is not None:
            return cls("oidc", issuer=auth.oidc.issuer, audience=auth.oidc.audience)
        if auth.mode == "kubernetes":
            return cls("kubernetes", audiences=tuple(auth.kubernetes.audiences))
        return cls()


class NetworkPeer(SpecModel):
    """Who else may reach the agents (a NetworkPolicy `from` entry)."""

    namespace_selector: LabelSelector | None = None
    """Namespaces (with `podSelector`: pods in those namespaces)."""
    pod_selector: LabelSelector | None = None
    """Pods (in the deployment's namespace, unless `namespaceSelector` is set)."""

    @model_validator(mode="after")
    def _one_selector(self) -> Self:
        if self.namespace_selector is None and self.pod_selector is None:
            raise ValueError("an allowFrom entry needs namespaceSelector, podSelector or both")
        return self


class NetworkSpec(SpecModel):
    """Network isolation of the deployment's agents."""

    policy: bool = False
    """Write a NetworkPolicy admitting traffic to the agents only from the deployment's own
    agents, its registry, the operator and `allowFrom`."""
    allow_from: Annotated[list[NetworkPeer], Field(max_length=32)] = Field(default_factory=list)
    """More peers that may reach the agents (clients, an ingress controller, Prometheus)."""


class PallasDeploymentSpec(SpecModel):
    """A group of agents sharing model, providers and tools."""

    version: Annotated[str, Field(min_length=1, max_length=255)] = "1.0.0"
    """Version published in every registry entry."""
    prompts: Annotated[list[Annotated[str, Field(min_length=1, max_length=65536)]], Field(max_length=16)] = (
        Field(default_factory=list)
    )
    """Prompts every agent of the deployment shares (house rules, the project's context), placed
    before each agent's own instruction in its system prompt, in order (seed M: the system
    block holds the project's prompts, then the agent's; a call's `systemAppend` comes last)."""
    model: ModelSpec
    """The default model."""
    providers: Annotated[dict[str, ProviderSpec], Field(min_length=1, max_length=32)]
    """LLM endpoints by name; model references are `<name>.<model>`."""
    mcp_servers: Annotated[dict[str, McpServerSpec], Field(max_length=128)] = Field(default_factory=dict)
    """Downstream MCP servers agents may use, by name."""
    a2a_agents: Annotated[dict[str, A2AAgentSpec], Field(alias="a2aAgents", max_length=128)] = Field(
        default_factory=dict
    )
    """External A2A agents the deployment's agents may call (`PallasAgent.spec.a2aAgents`), by name."""
    registry: RegistrySpec = RegistrySpec()
    """The registry."""
    runtime: RuntimeSpec = RuntimeSpec()
    """Pod defaults."""
    health_check: HealthCheckSpec = HealthCheckSpec()
    """Health checking."""
    monitoring: MonitoringSpec = MonitoringSpec()
    """Monitoring."""
    conversations: ConversationsSpec = ConversationsSpec()
    """Where conversations are kept."""
    auth: AuthSpec = AuthSpec()
    """Who may talk to the agents (docs/api.md §6)."""
    network: NetworkSpec = NetworkSpec()
    """Network isolation of the agents."""
    http: HttpLimits = HttpLimits()
    """Bounds on every request the agents' and the registry's HTTP listeners read, enforced
    before access control: head size, header count, the time to send a head, idle keep-alive."""
    tool_exposure: ToolExposureSpec = ToolExposureSpec()
    """How downstream tools reach the agents' models, unless an agent says otherwise."""
    telemetry: TelemetrySpec = TelemetrySpec()
    """Traces of the agents and the registry: where they go, how many, whether with content."""
    budgets: BudgetsSpec = BudgetsSpec()
    """Budgets of spend per window for each agent as a whole and for each caller (an agent's
    `budgets` override them field by field; docs/api.md §3, "Prices and budgets")."""
    scaling: ScalingSpec | None = None
    """The default scaling of its agents (`minReplicas`, `maxReplicas`, `idleSeconds`,
    `targetInFlight`; docs/api.md "Scaling"); an agent's `scaling` or `replicas` overrides it.
    Default: none, each agent runs its `replicas`."""
    log_level: LogLevel | None = None
    """Log level of the Pallas loggers in the agents' and the registry's pods
    (`PALLAS_LOG_LEVEL`); an agent's `logLevel` overrides it; default info."""

    @model_validator(mode="after")
    def _names(self) -> Self:
        for provider in self.providers:
            if not re.fullmatch(DNS_LABEL, provider):
                raise ValueError(f"provider name {provider!r} must be a DNS label (lower case, digits, '-')")
        for server in self.mcp_servers:
            if not re.fullmatch(SERVER_NAME, server) or len(server) > 63:
                raise ValueError(f"mcpServers name {server!r} must match {SERVER_NAME} (at most 63 chars)")
        for field, ref in [
            ("model.default", self.model.default),
            *(("model.models", m) for m in self.model.models),
        ]:
            provider = ref.split(".", 1)[0]
            if provider not in self.providers:
                raise ValueError(
                    f"{field} {ref!r} names provider {provider!r}, "
                    f"which is not in providers ({', '.join(sorted(self.providers))})"
                )
        return self
