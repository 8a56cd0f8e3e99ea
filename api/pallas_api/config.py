"""One agent's runtime configuration: the contract between the operator and an agent pod.

The operator renders this model into the agent's ConfigMap (`pallas agent --config FILE`);
`pallas run -f` builds it from manifests. It never holds a secret value: API keys, secret
header values and the PostgreSQL DSN are names the process looks up (`pallas_io.secrets`), files
of the pod's Secret volume in a cluster, environment variables under `pallas run`. Most of it is
applied by a running agent in place (`pallas_api.live`).
Field names are camelCase in files (like the CRDs) and snake_case in Python.
The field types it shares with the CRD spec (patterns, bounds, defaults, and the settings a spec
hands on as they are) are `pallas_api.fields`, below both; the config never imports the spec.
Their readers import them from `pallas_api.fields`: the config does not re-export them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Final, Literal, Self

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from pallas_api.approval import ApprovalPolicy
from pallas_api.fields import (
    CLOUD_REGION,
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_HISTORY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_TASK_TTL_SECONDS,
    ENV_VAR_NAME,
    GCP_PROJECT,
    HEADER_NAME,
    HTTP_URL,
    MAX_SCHEMA_BUDGET,
    MIN_SCHEMA_BUDGET,
    SERVER_NAME,
    CallParams,
    ConversationScope,
    DrainSeconds,
    HttpLimits,
    InputLimits,
    MaxConnections,
    MaxDepth,
    MaxHistoryBytes,
    MaxResultBytes,
    ModelCapabilities,
    ProviderApi,
    ProviderCredentials,
    ProviderPlatform,
    RequestParams,
    ServerSessionLimits,
    SessionLimits,
    StoreType,
    TaskTtl,
    ToolExposureMode,
    ToolPolicy,
)
from pallas_api.names import DNS_LABEL
from pallas_api.spending import BudgetConfig
from pallas_api.urls import (
    PEER_BEARER,
    PUBLIC_KEYS,
    PUBLISHED,
    SECRET_API_KEY,
    SECRET_HEADER,
    WithoutCredentials,
)
from pallas_api.validation import describe
from pallas_api.wire import camel_config
from pallas_api.workflow import WorkflowSpec


class _Model(BaseModel):
    model_config = camel_config(extra="forbid", validate_default=True)


SYSTEM_APPEND_MAX = 16384
SYSTEM_OVERRIDE_MAX = 65536
"""Characters of a call's `systemOverride` at most (an instruction's size, not an addition's)."""
GIVEN_HISTORY_MAX = 1000
"""Messages a call's `params.messages` may hold at most."""
GIVEN_MESSAGE_MAX = 65536
"""Characters of one message of a call's `params.messages` at most."""
TURN_CHOICES = frozenset({"model", "system_append", "system_override", "tools_allowlist", "messages"})
"""The `SendParams` fields that choose how the turn runs rather than tune the LLM request."""
"""Characters a call's `params.systemAppend` may add to the system prompt at most."""


class ProviderConfig(_Model):
    """The LLM endpoint the agent's model is served by."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    type: Literal["openai", "anthropic", "gemini", "bedrock"]
    """`bedrock`: Amazon Bedrock's Converse API in `region` (every model family); without a
    key variable it signs with the standard AWS credential chain (SigV4)."""
    base_url: Annotated[
        str | None, Field(alias="baseURL", pattern=HTTP_URL), WithoutCredentials(SECRET_API_KEY)
    ] = None
    api_key_env: Annotated[str | None, Field(pattern=ENV_VAR_NAME)] = None
    """The name the key is looked up by: a file of the pod's Secret volume, or an environment
    variable under `pallas run` (never the key itself)."""
    api_key_source: Annotated[str | None, Field(max_length=600)] = None
    """Where the key comes from in the user's words, for messages (`apiKeyEnv` is a name the
    renderer chose): `Secret llm-keys key OPENAI_API_KEY` in a pod, `environment variable
    OPENAI_API_KEY (secretKeyRef llm-keys/OPENAI_API_KEY)` under `pallas run`."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    max_retries: Annotated[int, Field(ge=0, le=10)] = 3
    """Retries with exponential backoff on 429, 5xx and connection errors."""
    streaming: bool = True
    """Whether completions are asked for as a stream when a caller follows the turn's progress
    (the provider's `capabilities.streaming`, default true)."""
    api: ProviderApi = "chat"
    """For `type: openai`: the API spoken, `chat` (Chat Completions) or `responses` (the
    Responses API, OpenAI's reasoning models' own)."""
    credentials: ProviderCredentials = "apiKey"
    """`apiKey` (the provider's key, `apiKeyEnv`) or `callerBearer`: each call's own inbound
    bearer token is the key, for that call only (never logged, never kept across calls)."""
    platform: ProviderPlatform = "direct"
    """For `type: anthropic`: `direct` (the Messages API at `baseURL`), `bedrock` (Amazon
    Bedrock's runtime in `region`, the key a Bedrock API key) or `vertex` (Vertex AI in `region`
    and `projectId`, the key an OAuth access token). For `type: gemini`: `direct` (the Gemini
    API) or `vertex` (the same wire format on Vertex AI)."""
    region: Annotated[str | None, Field(pattern=CLOUD_REGION, max_length=32)] = None
    """The cloud region of a `bedrock` or `vertex` provider."""
    project_id: Annotated[str | None, Field(pattern=GCP_PROJECT)] = None
    """The Google Cloud project of a `vertex` provider."""

    def api_key_origin(self) -> str:
        """What the user sets to give the key: `apiKeySource`, else the variable they named."""
        return self.api_key_source or f"environment variable {self.api_key_env}"


class ModelOption(_Model):
    """A model besides the agent's own that a call may choose with `params.model`."""

    model: Annotated[str, Field(min_length=1, max_length=253)]
    """The model id the provider knows."""
    capabilities: ModelCapabilities = ModelCapabilities()
    """What it can do, as the deployment declares it."""
    provider: ProviderConfig | None = None
    """The provider serving it when that is another of the deployment's than the agent's own;
    None: the agent's own provider."""

    @property
    def choice(self) -> str:
        """What `params.model` names it by.

        Its id on the agent's own provider; `<provider>.<model>` (the deployment's own reference)
        on another, so equal ids of two providers stay apart.
        """
        return self.model if self.provider is None else f"{self.provider.name}.{self.model}"


class HeaderConfig(_Model):
    """One HTTP header sent to a downstream server: a literal value or a named env var."""

    name: Annotated[str, Field(pattern=HEADER_NAME, max_length=256)]
    value: str | None = None
    value_from_env: Annotated[str | None, Field(pattern=ENV_VAR_NAME)] = None
    value_source: Annotated[str | None, Field(max_length=600)] = None
    """Where `valueFromEnv`'s value comes from in the user's words, for messages (as
    `provider.apiKeySource`)."""

    def value_origin(self) -> str:
        """What the user sets to give the value: `valueSource`, else the variable they named."""
        return self.value_source or f"environment variable {self.value_from_env}"

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.value is None) == (self.value_from_env is None):
            raise ValueError(f"header {self.name!r} needs exactly one of value or valueFromEnv")
        return self

    def resolve(self, environ: dict[str, str] | None = None) -> str | None:
        """The header's value now; None when its env var is unset."""
        if self.value is not None:
            return self.value
        env = os.environ if environ is None else environ
        return env.get(self.value_from_env or "")


class DownstreamServer(_Model):
    """A downstream MCP server the agent may call.

    A stdio server (`mcpServers.<name>.stdio`) is one too: the agent reaches it over Streamable
    HTTP at the URL of the bridge that hosts it (`pallas run`'s, or its Service in a cluster).
    """

    name: Annotated[str, Field(pattern=SERVER_NAME, max_length=63)]
    url: Annotated[str, Field(pattern=HTTP_URL), WithoutCredentials(SECRET_HEADER)]
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    headers: list[HeaderConfig] = Field(default_factory=list)
    forward_inbound_auth: bool = False
    """Send the caller's `Authorization` header on, per request (an explicit header wins)."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    max_result_bytes: MaxResultBytes = DEFAULT_MAX_RESULT_BYTES
    """The largest tool result read from this server (its text, UTF-8); larger is a tool error."""
    stateful: bool = False
    """Each caller conversation gets an MCP session of its own (`sessions` bounds them); else
    calls without a forwarded bearer share one session."""
    sessions: ServerSessionLimits = ServerSessionLimits()
    """The per-conversation sessions of a stateful server."""
    require_approval: ApprovalPolicy | None = None
    """The tools whose calls wait for the caller's approval (`pallas_api.approval`)."""


class PeerAgent(_Model):
    """Another Pallas agent offered to the model as the tool `<name>__send_message`."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    url: Annotated[str, Field(pattern=HTTP_URL), WithoutCredentials(PEER_BEARER)]
    forward_inbound_auth: bool = True
    """Agents of one deployment share a trust boundary, so the caller's bearer rides along."""
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 600.0
    max_result_bytes: MaxResultBytes = DEFAULT_MAX_RESULT_BYTES
    """The largest answer read from the peer."""


class A2APeer(_Model):
    """An external A2A agent offered to the model as the tool `<name>__send_message`."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    url: Annotated[str, Field(pattern=HTTP_URL), WithoutCredentials(SECRET_HEADER)]
    """Its Agent Card's URL, or the base URL the card is served under."""
    headers: list[HeaderConfig] = Field(default_factory=list)
    forward_inbound_auth: bool = False
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 600.0
    max_result_bytes: MaxResultBytes = DEFAULT_MAX_RESULT_BYTES
    """The largest answer read from it."""


class GivenMessage(_Model):
    """One earlier message of a history a call brings itself (`params.messages`)."""

    role: Literal["user", "assistant"]
    text: Annotated[str, Field(max_length=GIVEN_MESSAGE_MAX)]


class ConversationMetadata(_Model):
    """`create_conversation`'s `metadata`: how the new conversation runs (seed 004's `sessions_create`)."""

    provider: Annotated[str | None, Field(min_length=1, max_length=63)] = None
    """One of the deployment's providers the agent offers models of (`providers` keys); alone,
    it picks that provider's first offered model (the agent's own model for its own provider)."""
    model: Annotated[str | None, Field(min_length=1, max_length=253)] = None
    """A model as `params.model` names it, or its bare id on `provider`; every turn of the
    conversation runs on it unless the call sets `params.model`."""
    title: Annotated[str | None, Field(max_length=200)] = None
    """What `list_conversations` shows for it (default: the start of its first message)."""


class SendParams(RequestParams):
    """A `send_message` call's `params`: request parameters, the call's model and a system prompt addition.

    A request parameter the provider does not take is an error, as is a model the agent does
    not offer (the error lists those it does).
    """

    model: Annotated[str | None, Field(min_length=1, max_length=253)] = None
    """The model of this call, among those the agent offers (every model its deployment declares:
    by its id on the agent's own provider, as `<provider>.<model>` on another); default: the
    agent's model."""
    system_append: Annotated[str | None, Field(max_length=SYSTEM_APPEND_MAX)] = None
    """Text added to the end of the system prompt for this call only (at most 16384 characters)."""
    system_override: Annotated[str | None, Field(max_length=SYSTEM_OVERRIDE_MAX)] = None
    """The system prompt of this call in place of the agent's instruction (`systemAppend` still
    follows it); only where `callParams.allow` names `systemOverride`."""
    tools_allowlist: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]] | None, Field(max_length=64)
    ] = None
    """Globs over `<server>__<tool>` narrowing this call's tools: the model is offered only the
    agent's tools that match one (never more than `spec.tools` allows); `[]` offers none."""
    messages: Annotated[list[GivenMessage] | None, Field(max_length=GIVEN_HISTORY_MAX)] = None
    """The history of this call in place of a stored conversation's, oldest first (the call's
    `message` follows it): nothing is read from or kept in a conversation, so no `conversation_id`
    goes with it; only where `callParams.allow` names `messages`."""

    def request_params(self) -> RequestParams:
        """The request parameters alone, with the fields this call set (none of the choices)."""
        chosen = self.model_fields_set - TURN_CHOICES
        return RequestParams.model_construct(chosen, **{name: getattr(self, name) for name in chosen})


class ToolExposure(_Model):
    """How the agent's downstream tools reach its model and its own MCP clients."""

    mode: ToolExposureMode = "auto"
    """`all`: every allowed tool's schema on every LLM request; `onDemand`: the gateway tools
    (`list_servers`, `get_server_tools`, `execute_tool`) with an index of server and tool names,
    schemas loaded when the model asks; `auto`: `all` while the schemas fit the budget."""
    schema_budget_tokens: Annotated[int | None, Field(ge=MIN_SCHEMA_BUDGET, le=MAX_SCHEMA_BUDGET)] = None
    """Tokens the tool schemas of one LLM request may take (`auto`'s threshold, and the most one
    `get_server_tools` answer holds); None: a quarter of the model's input budget."""
    gateway: bool = False
    """Whether the agent's own MCP clients get the three gateway tools too (under the same
    policy, audit and metrics as the model's calls)."""


class HistoryLimits(_Model):
    """Bounds on stored conversations (least recently used ones are dropped first)."""

    max_messages: Annotated[int, Field(gt=0, le=100_000)] = 200
    """Messages kept per conversation."""
    max_conversations: Annotated[int, Field(gt=0, le=1_000_000)] = 1000
    """Conversations kept per process by the memory store (least recently used dropped first)."""
    max_bytes: MaxHistoryBytes = DEFAULT_HISTORY_BYTES
    """What conversations kept in the process may weigh: the memory store's conversations, a
    database store's cached transcripts (least recently used dropped first)."""


MAX_AGENT_IDENTITY = 300
"""Namespace, deployment and agent (63 each), a UID (36) and three slashes, with room to spare."""


class ConversationStoreConfig(_Model):
    """Where the agent keeps conversations (docs/api.md §3)."""

    type: StoreType = "memory"
    """`memory` (lost on restart, one process), `sqlite` (a file), `postgres` (shared by replicas)."""
    sqlite_path: str | None = None
    """The SQLite file (`type: sqlite`); default `$XDG_STATE_HOME/pallas/conversations.db`."""
    dsn_env: Annotated[str | None, Field(pattern=ENV_VAR_NAME)] = None
    """Environment variable holding the PostgreSQL DSN (`type: postgres`); never the DSN itself."""
    dsn_source: Annotated[str | None, Field(max_length=600)] = None
    """Where the DSN comes from in the user's words, for messages (as `provider.apiKeySource`)."""
    max_connections: MaxConnections = DEFAULT_MAX_CONNECTIONS
    """The most PostgreSQL connections this process opens (`type: postgres`): one pool shared by
    every piece of conversation work."""
    ttl_seconds: Annotated[int | None, Field(gt=0)] = None
    """Conversations untouched this long are deleted; None keeps them."""
    turn_wait_seconds: Annotated[float, Field(gt=0, le=3600)] = 600.0
    """How long a turn waits for the previous turn of its conversation before failing."""
    task_ttl_seconds: TaskTtl = DEFAULT_TASK_TTL_SECONDS
    """How long a finished MCP task (a `send_message` run as a task) keeps its result."""
    scope: ConversationScope | None = None
    """`caller`, `session` or `request`; None: `caller` with inbound auth, else `session`."""
    agent_identity: Annotated[str | None, Field(max_length=MAX_AGENT_IDENTITY)] = None
    """What keys this agent's conversations in a shared store: `<namespace>/<deployment>/<name>`,
    then `/<uid>` in a cluster (`names.agent_identity`); None: the agent's name alone."""
    abandoned_after_seconds: Annotated[int | None, Field(ge=3600)] = None
    """A database store deletes the conversations of agents that have not run for this long."""

    def dsn_origin(self) -> str:
        """What the user sets to give the DSN: `dsnSource`, else the variable they named."""
        return self.dsn_source or f"environment variable {self.dsn_env}"

    @model_validator(mode="after")
    def _needs(self) -> Self:
        if self.type == "postgres" and not self.dsn_env:
            raise ValueError("a postgres conversation store needs dsnEnv (the variable holding the DSN)")
        return self


class A2AConfig(_Model):
    """The agent's A2A surface beside MCP (docs/api.md §3 "A2A")."""

    enabled: bool = True
    """Serve the Agent Card and the A2A JSON-RPC endpoint."""
    url: Annotated[str | None, Field(pattern=HTTP_URL)] = None
    """The A2A endpoint as callers reach it (its Agent Card names it); None: the request's own
    address, as the card's reader reached it."""
    tags: list[str] = Field(default_factory=list)
    """The agent's discovery tags (`spec.capabilities`): the tags of its card's skill."""


HTTP_LIMIT_FLAGS: Final = {
    "max_head_bytes": ("--max-head-bytes", int, "largest request head in bytes"),
    "max_headers": ("--max-headers", int, "most header fields in one request"),
    "head_timeout_seconds": ("--head-timeout", float, "seconds to send a complete request head"),
    "keep_alive_seconds": ("--keep-alive", float, "seconds an idle connection is kept open"),
}
"""The flags of a serving command that set its listener's `HttpLimits`, by field.

Part of the contract: the operator writes them into the registry's pod (from `spec.http`) and
`pallas registry` parses them (`pallas_io.commands.add_http_limit_flags`)."""


class HealthSettings(_Model):
    """How `get_health` probes; it never calls the LLM."""

    probe_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 3.0
    provider_recheck_seconds: Annotated[float, Field(gt=0)] = 300.0
    """TTL of the provider preflight result; an older one is re-probed by `get_health`."""
    slow_llm_seconds: Annotated[float, Field(gt=0)] = 30.0
    """Recent LLM calls slower than this on average: `degraded`."""
    slow_tool_seconds: Annotated[float, Field(gt=0)] = 10.0
    """Recent calls of one downstream server or peer slower than this on average: `degraded`."""


INVOKE_VERB = "invoke"
"""The RBAC verb on `pallasagents/<name>` that lets a caller talk to an agent."""


class KubernetesAuthConfig(_Model):
    """TokenReview and SubjectAccessReview settings (`mode: kubernetes`)."""

    audiences: list[str] = Field(default_factory=list)
    """TokenReview `spec.audiences`; empty: the API server's own."""
    cache_seconds: Annotated[int, Field(ge=0, le=300)] = 10
    """How long a decision is reused for the same token."""


class OidcConfig(_Model):
    """The issuer whose JWTs the agent accepts (`mode: oidc`)."""

    issuer: Annotated[str, Field(pattern=HTTP_URL), WithoutCredentials(PUBLIC_KEYS)]
    audience: Annotated[str, Field(min_length=1)]
    jwks_url: Annotated[
        str | None, Field(alias="jwksURL", pattern=HTTP_URL), WithoutCredentials(PUBLIC_KEYS)
    ] = None
    """Default: discovered from the issuer's `/.well-known/openid-configuration`."""
    subject_claim: str = "sub"
    groups_claim: str = "groups"
    algorithms: list[str] = Field(default_factory=lambda: ["RS256"])
    jwks_refresh_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    """Least time between two JWKS fetches caused by an unknown key id (a rotation)."""


class AccessConfig(_Model):
    """Callers admitted by name or group; both empty: every authenticated caller."""

    subjects: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)


class AuthConfig(_Model):
    """Who may talk to this agent (docs/api.md §6)."""

    mode: Literal["none", "kubernetes", "oidc"] = "none"
    namespace: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)] = "default"
    """The agent's namespace: where the SubjectAccessReview asks about `pallasagents/<name>`."""
    resource: Annotated[str | None, Field(pattern=HTTP_URL), WithoutCredentials(PUBLISHED)] = None
    """The agent's MCP URL as clients use it: the RFC 9728 `resource`."""
    kubernetes: KubernetesAuthConfig = KubernetesAuthConfig()
    oidc: OidcConfig | None = None
    access: AccessConfig = AccessConfig()

    @model_validator(mode="after")
    def _settings(self) -> Self:
        if self.mode == "oidc" and self.oidc is None:
            raise ValueError("auth.mode oidc needs auth.oidc")
        if self.mode != "none" and self.resource is None:
            raise ValueError(f"auth.mode {self.mode} needs auth.resource (the agent's URL)")
        return self


class AgentConfig(_Model):
    """Everything one agent process needs; rendered into the agent's ConfigMap."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    title: str = ""
    description: Annotated[str, Field(max_length=100)] = ""
    version: str = "1.0.0"
    name_prefix: Annotated[str | None, Field(max_length=200)] = None
    """The deployment's `registry.namePrefix`: the reverse-DNS part of the agent's server name in
    its Server Card, as in the registry; None: the one derived from its namespace."""
    prompts: list[str] = Field(default_factory=list)
    """The deployment's shared prompts (`PallasDeployment.spec.prompts`), placed before the
    instruction in every system prompt, in order."""
    instruction: str = ""
    model: Annotated[str, Field(min_length=1)]
    """The model id the provider knows (without the `<provider>.` prefix)."""
    provider: ProviderConfig
    capabilities: ModelCapabilities = ModelCapabilities()
    servers: list[DownstreamServer] = Field(default_factory=list)
    missing_servers: list[Annotated[str, Field(max_length=63)]] = Field(default_factory=list)
    """Servers the agent's `servers` names that its deployment does not define: it runs without
    them, and `get_health` says so (degraded)."""
    agents: list[PeerAgent] = Field(default_factory=list)
    models: Annotated[list[ModelOption], Field(max_length=64)] = Field(default_factory=list)
    """The other models a call may choose with `params.model`: every model the deployment
    declares, another provider's with that provider's config."""
    a2a_agents: Annotated[list[A2APeer], Field(alias="a2aAgents")] = Field(default_factory=list)
    """External A2A agents, offered like `agents`."""
    request_params: RequestParams = RequestParams()
    call_params: CallParams = CallParams()
    """What a call's own `params` may set."""
    max_iterations: Annotated[int, Field(gt=0, le=1000)] = 12
    max_depth: MaxDepth = DEFAULT_MAX_DEPTH
    """The most agents a chain of agent-to-agent calls through this agent may have."""
    tools: ToolPolicy = ToolPolicy()
    tool_exposure: ToolExposure = ToolExposure()
    """How the downstream tools reach the model and the agent's own clients."""
    history: HistoryLimits = HistoryLimits()
    conversations: ConversationStoreConfig = ConversationStoreConfig()
    limits: InputLimits = InputLimits()
    health: HealthSettings = HealthSettings()
    auth: AuthConfig = AuthConfig()
    sessions: SessionLimits = SessionLimits()
    busy_at: Annotated[int | None, Field(ge=1)] = None
    """At least this many send_message calls in flight: `get_health` says busy (None: never)."""
    http: HttpLimits = HttpLimits()
    """Bounds on the requests the agent's HTTP listener reads (the deployment's `http`)."""
    a2a: Annotated[A2AConfig, Field(alias="a2a")] = A2AConfig()
    """The A2A surface: on unless `spec.a2a.enabled` is false."""
    budgets: BudgetConfig = BudgetConfig()
    """Budgets of spend: the deployment's `budgets`, each field overridden by the agent's."""
    workflow: Annotated[WorkflowSpec | None, Field(exclude_if=lambda w: w is None)] = None
    """The agent's workflow (`spec.workflow`): steps called in a declared shape in place of the
    LLM/tool loop. Its PallasAgent steps are among `agents`, its external ones among `a2aAgents`.
    Left out of the rendered config when unset, so an ordinary agent's config hash is unchanged."""
    drain_seconds: DrainSeconds = DEFAULT_DRAIN_SECONDS
    """On SIGTERM: how long turns in flight may run on before they are interrupted (and kept in
    their conversations as failed); new sessions are refused meanwhile."""

    @model_validator(mode="after")
    def _unique_tool_sources(self) -> Self:
        seen: set[str] = set()
        sources = [s.name for s in self.servers] + [a.name for a in self.agents]
        for source in sources + [a.name for a in self.a2a_agents]:
            if source in seen:
                raise ValueError(f"{source!r} is listed twice among servers and agents")
            seen.add(source)
        if self.name in {a.name for a in self.agents}:
            raise ValueError(f"agent {self.name!r} lists itself among its agents")
        if self.workflow is not None:
            servers = {s.name for s in self.servers}
            unknown = [s for s in self.workflow.steps() if s not in seen or s in servers]
            if unknown:
                raise ValueError(f"workflow steps {', '.join(unknown)} are neither agents nor a2aAgents")
        return self

    def model_option(self, model: str) -> ModelOption | None:
        """The model a call chose by its id: the agent's own or one of `models`; None if neither."""
        if model == self.model:
            return ModelOption(model=self.model, capabilities=self.capabilities)
        return next((option for option in self.models if option.choice == model), None)

    @property
    def offered_models(self) -> list[str]:
        """Every model id a call may choose: the agent's own first."""
        return list(dict.fromkeys([self.model, *(option.choice for option in self.models)]))

    @property
    def conversation_scope(self) -> ConversationScope:
        """The scope in force: the configured one, else `caller` when callers are identified."""
        if self.conversations.scope is not None:
            return self.conversations.scope
        return "session" if self.auth.mode == "none" else "caller"

    @property
    def identity(self) -> str:
        """What keys this agent's conversations (`conversations.agentIdentity`, else the name)."""
        return self.conversations.agent_identity or self.name

    @property
    def display_title(self) -> str:
        """The title clients show: `title`, else the name in title case."""
        return self.title or self.name.replace("-", " ").title()


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the field."""


def parse_config(data: object, source: str = "config") -> AgentConfig:
    """Validate already-loaded data; errors name the source and each bad field."""
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe(exc)}") from None


def load_config(path: str | Path, text: str | None = None) -> AgentConfig:
    """Load an agent config from a YAML or JSON file (`text`: its content, already read)."""
    path = Path(path)
    if text is None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from None
    return parse_config(data, str(path))


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's dumper when PyYAML has it (its wheels do): ~10x faster than the pure-Python one,
which cost the operator ~10 ms per agent reconcile."""


def render_config(config: AgentConfig) -> str:
    """The YAML the operator writes into the ConfigMap (camelCase, defaults included)."""
    return yaml.dump(config.model_dump(mode="json", by_alias=True), Dumper=_Dumper, sort_keys=False)
