"""What both kinds' specs are made of: their patterns, Secret references, headers and selectors.

Below `deployment` and `agent` (as CloudNativePG's `api/v1/common_types.go` sits below its
per-kind types); the field types the specs share with the pod's config are `pallas_api.fields`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, model_validator

from pallas_api.fields import HEADER_NAME, MAX_SCHEMA_BUDGET, MIN_SCHEMA_BUDGET, ONCE, SET, ToolExposureMode
from pallas_api.names import DNS_LABEL, DNS_LABEL_FORM
from pallas_api.wire import camel_config

DNS_SUBDOMAIN = rf"^{DNS_LABEL_FORM}(\.{DNS_LABEL_FORM})*$"
MODEL_REF = rf"^{DNS_LABEL_FORM}\.[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
"""`<provider>.<model>`: the provider is a key of spec.providers, the model its model id."""
REVERSE_DNS = r"^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)+$"
DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
"""A level of the Pallas loggers, as `PALLAS_LOG_LEVEL` takes it (docs/api.md §2, environment)."""
OPTIONAL_HTTP_URL = r"^(https?://[^\s]+)?$"
ICON_SRC = r"^((https?|data):|[^:/?#\s]*([/?#]|$))"
"""An http(s) or data: URI, or a relative reference (no scheme: its first segment has no colon)."""


NameList = Annotated[
    list[Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]], Field(max_length=64), SET, ONCE
]


class SpecModel(BaseModel):
    """The base of every spec model: camelCase fields, and an unknown field is an error."""

    model_config = camel_config(extra="forbid")


class SecretKeyRef(SpecModel):
    """A key of a Secret in the resource's namespace."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)]
    """Name of the Secret."""
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]
    """Key within the Secret. `pallas run` falls back to the environment variable of this name."""


class SecretSource(SpecModel):
    """Where a secret value comes from: only by reference, never inline."""

    secret_key_ref: SecretKeyRef
    """The Secret key holding the value."""


class HeaderSpec(SpecModel):
    """An HTTP header sent to a downstream MCP server."""

    name: Annotated[str, Field(pattern=HEADER_NAME, max_length=256)]
    """Header name."""
    value: str | None = None
    """Literal value (not for secrets)."""
    value_from: SecretSource | None = None
    """Value from a Secret."""

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"header {self.name!r} needs exactly one of value or valueFrom")
        return self


class ResourceRequirements(SpecModel):
    """Compute resources of a container (as in a Pod spec)."""

    limits: dict[str, str] = Field(default_factory=dict)
    """Maximum resources, e.g. `{cpu: "1", memory: 512Mi}`."""
    requests: dict[str, str] = Field(default_factory=dict)
    """Guaranteed resources."""


EnvVar = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
Toleration = Annotated[
    dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
]


class LabelSelectorRequirement(SpecModel):
    """One label expression of a selector."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    """Label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the key relates to the values."""
    values: Annotated[list[str], Field(max_length=64)] = Field(default_factory=list)
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(SpecModel):
    """A Kubernetes label selector."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    """Labels that must all be present with these values."""
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=16)] = Field(
        default_factory=list
    )
    """Expressions that must all hold."""


LABEL_KEY = rf"^({DNS_LABEL_FORM}(\.{DNS_LABEL_FORM})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
"""A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name."""
LabelKey = Annotated[str, Field(pattern=LABEL_KEY, min_length=1, max_length=317)]


class ToolExposureSpec(SpecModel):
    """How downstream tools reach an agent's model (docs/api.md §1, "Tools at scale").

    On a deployment the default; on an agent each field set overrides the deployment's.
    """

    mode: ToolExposureMode | None = None
    """`all` (every allowed tool's schema on every LLM request), `onDemand` (the model gets
    `list_servers`, `get_server_tools` and `execute_tool` with an index of server and tool names,
    and loads the schemas it needs) or `auto` (`all` while the schemas fit `schemaBudgetTokens`,
    else `onDemand`). Default `auto`. Peer agents are always offered directly."""
    schema_budget_tokens: Annotated[int | None, Field(ge=MIN_SCHEMA_BUDGET, le=MAX_SCHEMA_BUDGET)] = None
    """Tokens the tool schemas of one LLM request may take: `auto`'s threshold and the most one
    `get_server_tools` answer holds. Default: a quarter of the model's input budget (its context
    window less the room kept for the answer)."""
    gateway: bool | None = None
    """Also offer `list_servers`, `get_server_tools` and `execute_tool` to the agent's own MCP
    clients, so a client can use the agent as a policy-enforcing gateway to its servers (same
    tool policy, audit lines, metrics and error codes as the model's calls). Default false."""


class ScalingSpec(SpecModel):
    """Replicas that follow the agent's use: none while idle, more under load (issue 53).

    The operator's own loop sizes the agent (docs/operator.md, "Scaling"): after `idleSeconds`
    without a turn it goes to `minReplicas` (with 0 it sleeps and the activator wakes it at the
    next request); under load, replicas follow the turns in flight per ready pod against
    `targetInFlight`, between `minReplicas` (at least 1 while awake) and `maxReplicas`.
    """

    min_replicas: Annotated[int, Field(ge=0, le=100)] = 0
    """Pods kept when the agent is idle; 0 lets it sleep (no pods)."""
    max_replicas: Annotated[int, Field(ge=1, le=100)] = 5
    """The most pods load may add."""
    idle_seconds: Annotated[int, Field(ge=30, le=604_800)] = 900
    """Seconds without a turn (send_message, A2A message, task, trigger run) before the agent goes
    to `minReplicas`, 30 to 604800 (a week)."""
    target_in_flight: Annotated[int, Field(ge=1, le=10_000)] = 4
    """Turns in flight per ready pod the loop aims at; more adds pods, fewer removes them."""

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"scaling.minReplicas ({self.min_replicas}) is more than "
                f"scaling.maxReplicas ({self.max_replicas})"
            )
        return self
