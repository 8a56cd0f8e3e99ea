"""One agent's runtime configuration: the contract between the operator and an agent pod.

The operator renders this model into the agent's ConfigMap (`pallas agent --config FILE`);
`pallas run -f` builds it from manifests. It never holds a secret value: API keys, secret
header values and the PostgreSQL DSN are names the process looks up (`pallas_io.secrets`), files
of the pod's Secret volume in a cluster, environment variables under `pallas run`. Most of it is
applied by a running agent in place (`pallas_api.live`).
Field names are camelCase in files (like the CRDs) and snake_case in Python.
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self, get_args

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from pallas_api.approval import ApprovalPolicy
from pallas_api.names import DNS_LABEL
from pallas_api.spending import BudgetConfig, ModelPrice
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

ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
HTTP_URL = r"^https?://[^\s]+$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
MiB = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES = 8 * MiB
"""The largest tool result or peer answer read by default (the MCP client's own limit is 1 MiB)."""
MaxResultBytes = Annotated[int, Field(ge=64 * 1024, le=64 * MiB)]
DEFAULT_HISTORY_BYTES = 64 * MiB
"""What conversations kept in one agent process may weigh by default (`history.maxBytes`)."""
MaxHistoryBytes = Annotated[int, Field(ge=MiB, le=64 * 1024 * MiB)]
DEFAULT_MAX_DEPTH = 5
MaxDepth = Annotated[int, Field(ge=1, le=50)]
DEFAULT_DRAIN_SECONDS = 120
"""How long a stopping agent lets its turns in flight finish by default (`drainSeconds`): LLM turns
with tool calls often take tens of seconds, some minutes."""
DrainSeconds = Annotated[int, Field(ge=0, le=3600)]
DEFAULT_MAX_CONNECTIONS = 5
"""PostgreSQL connections an agent process opens by default: a default server's 100 connections
serve twenty agent processes (e.g. four agents of five replicas each, or seven of three)."""
MaxConnections = Annotated[int, Field(ge=1, le=100)]


class _Model(BaseModel):
    model_config = camel_config(extra="forbid", validate_default=True)


class ModelCapabilities(_Model):
    """What the model can do; published in the registry and enforced on input."""

    vision: bool = False
    """Whether the model accepts images; images sent to a model without vision are refused."""
    context_window: Annotated[int, Field(gt=0)] = 131072
    """Context window in tokens (published in the registry)."""
    max_output_tokens: Annotated[int, Field(gt=0)] = 16384
    """Largest completion in tokens; the default max_tokens for Anthropic models."""
    price: ModelPrice | None = None
    """What the model costs per million tokens (`input`, `output`, `cachedInput`), for cost
    metrics and cost budgets; absent: its calls cost nothing."""


ProviderApi = Literal["chat", "responses"]
"""The API an `openai` provider speaks: Chat Completions or the Responses API."""
ProviderCredentials = Literal["apiKey", "callerBearer"]
"""Where a provider's key comes from: its own API key, or the caller's bearer token per call."""
ProviderPlatform = Literal["direct", "bedrock", "vertex"]
"""Where an `anthropic` provider's Messages API is served: Anthropic's own API (or a compatible
server), Amazon Bedrock, or Google Cloud's Vertex AI."""
CLOUD_REGION = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
"""A cloud region name: AWS's `eu-central-1`, Google Cloud's `us-east5` or `global`."""
GCP_PROJECT = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"
SYSTEM_APPEND_MAX = 16384
"""Characters a call's `params.systemAppend` may add to the system prompt at most."""


class ProviderConfig(_Model):
    """The LLM endpoint the agent's model is served by."""

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    type: Literal["openai", "anthropic"]
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
    and `projectId`, the key an OAuth access token)."""
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


class ServerSessionLimits(_Model):
    """The sessions an agent process keeps to one stateful downstream server (one per conversation)."""

    max_sessions: Annotated[int, Field(ge=1, le=10_000)] = 32
    """Sessions open at once. When all are taken, the one unused longest with no call in flight
    is closed to make room; a call finding every session busy fails (SERVER_UNAVAILABLE)."""
    idle_timeout_seconds: Annotated[int, Field(ge=1, le=86_400)] = 1800
    """A session no call has used for this long is closed (its conversation starts a new one)."""


class DownstreamServer(_Model):
    """A downstream MCP server the agent may call.

    A stdio server (`mcpServers.<name>.stdio`) is one too: the agent reaches it over Streamable
    HTTP at the URL of the bridge that hosts it (`pallas run`'s, or its Service in a cluster).
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$", max_length=63)]
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


FreeForm = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
TOOL_CHOICE = r"^(auto|none|required|[A-Za-z0-9][A-Za-z0-9_-]*__[^\s]+)$"
PARAM_FIELDS_ON_THE_WIRE = frozenset(
    {
        "model", "messages", "system", "tools", "tool_choice", "stream", "stream_options",
        "temperature", "top_p", "top_k", "max_tokens", "max_completion_tokens", "stop",
        "stop_sequences", "seed", "presence_penalty", "frequency_penalty", "response_format",
        "reasoning_effort", "output_config", "input", "instructions", "max_output_tokens", "reasoning",
        "text",
    }
)  # fmt: skip
"""Request fields Pallas writes itself: `extra` may not set them (say them by their own names)."""


class JsonSchemaFormat(_Model):
    """The JSON Schema a `json_schema` response must follow."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    """Name of the format (letters, digits, `_`, `-`; at most 64)."""
    schema_: FreeForm = Field(alias="schema")
    """The JSON Schema."""
    description: Annotated[str | None, Field(max_length=1000)] = None
    """What the format is for."""
    strict: bool | None = None
    """Whether the provider must follow the schema exactly (OpenAI structured outputs)."""


class ResponseFormat(_Model):
    """The shape of the model's answer."""

    type: Literal["text", "json_object", "json_schema"]
    """`text` (the default), `json_object` (any JSON object) or `json_schema` (one that follows
    `jsonSchema`)."""
    json_schema: JsonSchemaFormat | None = None
    """The schema, for `type: json_schema` (only then)."""

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> Self:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("responseFormat needs jsonSchema exactly when its type is json_schema")
        return self


class RequestParams(_Model):
    """Model request parameters (sampling and output controls).

    In an agent's spec, those its provider does not support are dropped with one warning (the
    spec may outlive a change of model); in a `send_message` call's `params`, they are an error.
    """

    temperature: Annotated[float | None, Field(ge=0, le=2)] = None
    """Sampling temperature."""
    top_p: Annotated[float | None, Field(gt=0, le=1)] = None
    """Nucleus sampling probability mass."""
    top_k: Annotated[int | None, Field(gt=0)] = None
    """Top-k sampling (OpenAI-compatible servers and Anthropic; not native OpenAI)."""
    max_tokens: Annotated[int | None, Field(gt=0)] = None
    """Largest completion in tokens."""
    stop: Annotated[list[str] | None, Field(max_length=16)] = None
    """Stop sequences."""
    seed: int | None = None
    """Sampling seed (OpenAI-compatible providers)."""
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    """Reasoning effort for models that take it (OpenAI reasoning_effort, Anthropic output_config)."""
    presence_penalty: Annotated[float | None, Field(ge=-2, le=2)] = None
    """Penalty on tokens already present (OpenAI-compatible providers)."""
    frequency_penalty: Annotated[float | None, Field(ge=-2, le=2)] = None
    """Penalty on tokens by their frequency so far (OpenAI-compatible providers)."""
    response_format: ResponseFormat | None = None
    """The answer's shape: text, a JSON object, or JSON following a schema (OpenAI-compatible
    providers; Anthropic takes only text)."""
    tool_choice: Annotated[str | None, Field(pattern=TOOL_CHOICE, max_length=256)] = None
    """`auto`, `none` (answer without tools), `required` (call some tool) or a tool's
    `<server>__<tool>` name (call that one). A forcing choice applies to the first LLM call of a
    turn only, so the model can answer once it has the result."""
    extra: FreeForm | None = None
    """Provider-specific request fields, sent as they are at the top level of the request (e.g.
    vLLM `repetition_penalty`, Anthropic `metadata: {user_id}`); not fields Pallas sets itself."""

    @model_validator(mode="after")
    def _extra_sets_no_field_of_ours(self) -> Self:
        taken = sorted(PARAM_FIELDS_ON_THE_WIRE.intersection(self.extra or {}))
        if taken:
            raise ValueError(
                f"extra may not set {', '.join(taken)}: Pallas writes {'it' if len(taken) == 1 else 'them'} "
                "itself (use the parameter of that name)"
            )
        return self


CallParamName = Literal[
    "temperature", "topP", "topK", "maxTokens", "stop", "seed", "effort", "presencePenalty",
    "frequencyPenalty", "responseFormat", "toolChoice", "model", "systemAppend",
]  # fmt: skip
"""A request parameter by its camelCase name, as a call's `params` and `requestParams` spell it."""
EXTRA_FIELD = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"


class SendParams(RequestParams):
    """A `send_message` call's `params`: request parameters, the call's model and a system prompt addition.

    A request parameter the provider does not take is an error, as is a model the agent does
    not offer (the error lists those it does).
    """

    model: Annotated[str | None, Field(min_length=1, max_length=253)] = None
    """The model of this call, by its id, among those the agent offers (its own and the other
    models its deployment declares for its provider); default: the agent's model."""
    system_append: Annotated[str | None, Field(max_length=SYSTEM_APPEND_MAX)] = None
    """Text added to the end of the system prompt for this call only (at most 16384 characters)."""

    def request_params(self) -> RequestParams:
        """The request parameters alone, with the fields this call set (none of the choices)."""
        chosen = self.model_fields_set - {"model", "system_append"}
        return RequestParams.model_construct(chosen, **{name: getattr(self, name) for name in chosen})


class CallParams(_Model):
    """What a `send_message` call's own `params` may set; the agent's `requestParams` always apply.

    A call that sets anything else is refused before the model is called: per-call provider
    fields can multiply the cost of a call (`n`, `best_of`), buy a pricier service tier
    (`service_tier`) or change how the provider keeps the data (`store`).
    """

    allow: Annotated[list[CallParamName], Field(max_length=16)] = Field(
        default_factory=lambda: list(get_args(CallParamName))
    )
    """Parameters a call may set or clear (`null`); default: every one of them. `extra` is
    governed by `callParams.extra`."""
    extra: Annotated[list[Annotated[str, Field(pattern=EXTRA_FIELD)]], Field(max_length=64)] = Field(
        default_factory=list
    )
    """Provider fields a call may set in `params.extra` (e.g. `repetition_penalty`); default
    none. The agent's own `requestParams.extra` is sent whatever this says."""

    @model_validator(mode="after")
    def _extra_names_no_field_of_ours(self) -> Self:
        taken = sorted(PARAM_FIELDS_ON_THE_WIRE.intersection(self.extra))
        if taken:
            raise ValueError(f"callParams.extra may not name {', '.join(taken)}: Pallas writes them itself")
        return self

    def refusal(self, params: RequestParams) -> str | None:
        """Why a call may not send `params`: each field it may not set and the setting, or None."""
        fields = [to_camel(name) for name in sorted(params.model_fields_set - {"extra"})]
        refused = [f"params.{name}" for name in fields if name not in self.allow]
        refused_extra = [f"params.extra.{name}" for name in sorted(set(params.extra or {}) - set(self.extra))]
        if not refused and not refused_extra:
            return None
        settings = []
        if refused:
            settings.append(f"spec.callParams.allow: {', '.join(self.allow) or 'none'}")
        if refused_extra:
            settings.append(f"spec.callParams.extra: {', '.join(self.extra) or 'none'}")
        them = "it" if len(refused) + len(refused_extra) == 1 else "them"
        return (
            f"{', '.join(refused + refused_extra)}: this agent does not let a call set {them} "
            f"({'; '.join(settings)})"
        )


class ToolPolicy(_Model):
    """Globs over `<server>__<tool>`: a tool is offered when allowed and not denied."""

    allow: list[str] = Field(default_factory=lambda: ["*"])
    """Globs of tools offered to the model (default: all)."""
    deny: list[str] = Field(default_factory=list)
    """Globs of tools never offered or dispatched, even when allowed."""

    def permits(self, qualified_name: str) -> bool:
        """Whether the model may see and call `qualified_name`."""
        allowed = any(fnmatch.fnmatchcase(qualified_name, glob) for glob in self.allow)
        return allowed and not any(fnmatch.fnmatchcase(qualified_name, glob) for glob in self.deny)


ToolExposureMode = Literal["all", "onDemand", "auto"]
"""How an agent's downstream tools reach its model (docs/api.md §1, `toolExposure`)."""

MIN_SCHEMA_BUDGET = 256
MAX_SCHEMA_BUDGET = 10_000_000


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


class SessionLimits(_Model):
    """The MCP sessions one agent process keeps open (each holds ~40 KiB while it lives)."""

    max_sessions: Annotated[int, Field(ge=1, le=100_000)] = 1000
    """Sessions open at once. When all are taken, the session idle longest (no request in
    flight; an open notification stream does not count as one) is closed to make room; a new
    session is refused (503) only when every session is in the middle of a request."""
    max_per_caller: Annotated[int, Field(ge=1, le=100_000)] = 32
    """Sessions one authenticated caller may hold; its own session idle longest makes room for
    its next one. Without inbound auth every client is the same caller, so this does not apply."""
    idle_timeout_seconds: Annotated[int, Field(ge=1, le=86_400)] = 1800
    """A session without a request for this long is closed (its client starts a new one)."""


StoreType = Literal["memory", "sqlite", "postgres"]
ConversationScope = Literal["caller", "session", "request"]
"""What a `send_message` without `conversation_id` continues (docs/api.md §3)."""


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


class InputLimits(_Model):
    """Bounds on what one `send_message` may carry, and on what it hands on."""

    max_message_bytes: Annotated[int, Field(gt=0)] = MiB
    """Largest message text in UTF-8 bytes."""
    max_images: Annotated[int, Field(ge=0, le=100)] = 8
    """Most images in one message."""
    max_image_bytes: Annotated[int, Field(gt=0)] = 2 * MiB
    """Largest decoded image in bytes. One request carries at most 4 MiB in all (the MCP SDK's
    limit), and base64 makes an image a third larger."""
    image_types: list[str] = Field(
        default_factory=lambda: ["image/png", "image/jpeg", "image/gif", "image/webp"]
    )
    """Accepted image MIME types."""
    max_tool_result_bytes: Annotated[int, Field(ge=1024, le=64 * MiB)] = 256 * 1024
    """The most of one tool result's text given to the model; the rest is cut with a marker."""
    max_answer_bytes: Annotated[int, Field(ge=1024, le=64 * MiB)] = 512 * 1024
    """The longest answer sent back (UTF-8); longer ones are cut with a marker, so every MCP client
    can read them (the MCP SDK's clients read at most 1 MiB per event)."""


class A2AConfig(_Model):
    """The agent's A2A surface beside MCP (docs/api.md §3 "A2A")."""

    enabled: bool = True
    """Serve the Agent Card and the A2A JSON-RPC endpoint."""
    url: Annotated[str | None, Field(pattern=HTTP_URL)] = None
    """The A2A endpoint as callers reach it (its Agent Card names it); None: the request's own
    address, as the card's reader reached it."""
    tags: list[str] = Field(default_factory=list)
    """The agent's discovery tags (`spec.capabilities`): the tags of its card's skill."""


class HttpLimits(_Model):
    """Bounds on every request an HTTP listener reads, enforced before routing and access control.

    They hold for the agents' and the registry's listeners (docs/api.md §3 "Request limits"):
    what a client may make a server hold in memory, and for how long, before it is known who
    the client is.
    """

    max_head_bytes: Annotated[int, Field(ge=1024, le=MiB)] = 16 * 1024
    """Largest request head (request line and header fields) in bytes; a larger one is answered
    431, or 414 when the request line alone is larger."""
    max_headers: Annotated[int, Field(ge=8, le=1000)] = 100
    """Most header fields in one request; more are answered 431."""
    head_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    """Time from a request's first byte (or the connection's start) to its complete head; a
    slower head is answered 408, a connection that sent nothing is closed."""
    keep_alive_seconds: Annotated[float, Field(gt=0, le=3600)] = 5.0
    """How long an idle connection is kept open after a response for the client's next request."""


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
    instruction: str = ""
    model: Annotated[str, Field(min_length=1)]
    """The model id the provider knows (without the `<provider>.` prefix)."""
    provider: ProviderConfig
    capabilities: ModelCapabilities = ModelCapabilities()
    servers: list[DownstreamServer] = Field(default_factory=list)
    agents: list[PeerAgent] = Field(default_factory=list)
    models: Annotated[list[ModelOption], Field(max_length=64)] = Field(default_factory=list)
    """The other models a call may choose with `params.model`: those the deployment declares for
    the agent's provider."""
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
        return self

    def model_option(self, model: str) -> ModelOption | None:
        """The model a call chose by its id: the agent's own or one of `models`; None if neither."""
        if model == self.model:
            return ModelOption(model=self.model, capabilities=self.capabilities)
        return next((option for option in self.models if option.model == model), None)

    @property
    def offered_models(self) -> list[str]:
        """Every model id a call may choose: the agent's own first."""
        return list(dict.fromkeys([self.model, *(option.model for option in self.models)]))

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
