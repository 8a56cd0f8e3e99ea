"""The field types the CRD spec and the pod config share: patterns, bounds, defaults and settings.

Both `spec` (what users write) and `config` (what one agent process reads) are built on these;
neither imports the other. Besides the patterns, constrained scalars and defaults, the settings
models here (`RequestParams`, `CallParams`, `ToolPolicy`, `InputLimits`, `SessionLimits`,
`ServerSessionLimits`, `HttpLimits`, `ModelCapabilities`) have one shape on both sides: the
renderer copies them from a spec into the config as they are, so they are defined once, below
both (as CloudNativePG's `api/v1/common_types.go` sits below its per-kind types).
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import AfterValidator, BaseModel, Field, model_validator
from pydantic.alias_generators import to_camel

from pallas_api.spending import ModelPrice
from pallas_api.wire import camel_config

ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
HTTP_URL = r"^https?://[^\s]+$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
"""A downstream MCP server's name (a key of `mcpServers`), as tool names `<server>__<tool>` carry it."""
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

ToolExposureMode = Literal["all", "onDemand", "auto"]
"""How an agent's downstream tools reach its model (docs/api.md §1, `toolExposure`)."""
MIN_SCHEMA_BUDGET = 256
MAX_SCHEMA_BUDGET = 10_000_000

StoreType = Literal["memory", "sqlite", "postgres"]
ConversationScope = Literal["caller", "session", "request"]
DEFAULT_TASK_TTL_SECONDS = 3600
TaskTtl = Annotated[int, Field(gt=0, le=604_800)]
"""Seconds a finished MCP task is kept (at most a week)."""
"""What a `send_message` without `conversation_id` continues (docs/api.md §3)."""


def _each_once(items: list[Any]) -> list[Any]:
    repeated = [item for index, item in enumerate(items) if item in items[:index]]
    if repeated:
        raise ValueError(f"duplicate value {repeated[0]!r}: each value may appear once")
    return items


SET = Field(json_schema_extra={"x-kubernetes-list-type": "set"})
"""A list the API server keeps as a set (it refuses a repeated value); `ONCE` checks the same."""
ONCE = AfterValidator(_each_once)


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


class ServerSessionLimits(_Model):
    """The sessions an agent process keeps to one stateful downstream server (one per conversation)."""

    max_sessions: Annotated[int, Field(ge=1, le=10_000)] = 32
    """Sessions open at once. When all are taken, the one unused longest with no call in flight
    is closed to make room; a call finding every session busy fails (SERVER_UNAVAILABLE)."""
    idle_timeout_seconds: Annotated[int, Field(ge=1, le=86_400)] = 1800
    """A session no call has used for this long is closed (its conversation starts a new one)."""


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
    "frequencyPenalty", "responseFormat", "toolChoice", "model", "systemAppend", "toolsAllowlist",
    "systemOverride", "messages",
]  # fmt: skip
"""A request parameter by its camelCase name, as a call's `params` and `requestParams` spell it."""
EXTRA_FIELD = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
OPT_IN_PARAMS = frozenset({"systemOverride", "messages"})
"""Call parameters only an agent that names them in `callParams.allow` takes: they replace what
its author wrote (the instruction) or what the agent keeps (the history), not only tune the request."""


class CallParams(_Model):
    """What a `send_message` call's own `params` may set; the agent's `requestParams` always apply.

    A call that sets anything else is refused before the model is called: per-call provider
    fields can multiply the cost of a call (`n`, `best_of`), buy a pricier service tier
    (`service_tier`) or change how the provider keeps the data (`store`).
    """

    allow: Annotated[list[CallParamName], Field(max_length=len(get_args(CallParamName)))] = Field(
        default_factory=lambda: [name for name in get_args(CallParamName) if name not in OPT_IN_PARAMS]
    )
    """Parameters a call may set or clear (`null`); default: every one but `systemOverride` and
    `messages`, which replace the agent's instruction or its stored history and so must be
    allowed by name. `extra` is governed
    by `callParams.extra`."""
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
