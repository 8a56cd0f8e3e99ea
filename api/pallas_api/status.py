"""The status of both resources: what the operator writes and `kubectl`/the registry read.

The models are the schema source of the CRDs' `status` (as `spec` is of their `spec`), and the
operator's status policy builds instances of them, so what is written always validates; the
registry reads status with the same models.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, Field

from pallas_api.conditions import HealthStatus
from pallas_api.spending import SpendReport
from pallas_api.wire import camel_config
from pallas_api.workflow import WorkflowType

Phase = Literal["Pending", "Waiting", "Progressing", "Ready", "Degraded", "Failed"]
PHASES: tuple[Phase, ...] = get_args(Phase)
ConditionStatus = Literal["True", "False", "Unknown"]
ProviderCheckStatus = Literal["ok", "error"]


class _Status(BaseModel):
    model_config = camel_config(extra="ignore")

    def to_wire(self) -> dict[str, object]:
        """The camelCase dict as stored in the API server (unset optionals left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(_Status):
    """One aspect of the resource's state, as in every Kubernetes API."""

    type: Annotated[str, Field(max_length=316)]
    """CamelCase kind of condition, e.g. `Ready`."""
    status: ConditionStatus
    """`True`, `False` or `Unknown`."""
    reason: Annotated[str, Field(max_length=1024)]
    """CamelCase reason for the last transition, e.g. `DeploymentNotFound`."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """What is wrong and how to fix it, for humans."""
    observed_generation: Annotated[int, Field(ge=0)] = 0
    """The metadata.generation this condition was computed from."""
    last_transition_time: str
    """When `status` last changed (RFC 3339)."""


class Health(_Status):
    """The last answer of the agent's `get_health` tool."""

    status: HealthStatus
    """`ok`, `degraded` or `error`."""
    message: str = ""
    """What is wrong when not ok."""
    checked_at: str
    """When this result was first seen (RFC 3339); it moves only when the result changes."""
    busy: bool | None = None
    """Whether the pod that answered had `spec.busyAt` send_message calls in flight or more
    (absent without `busyAt`)."""
    spend: SpendReport | None = None
    """What the agent spent in its agent budget's current window: `window`, `tokens`, `cost`,
    `tokenLimit`, `costLimit`, `resetsAt` (absent without `spec.budgets.agent`)."""


class ServerInfo(_Status):
    """What the agent said about itself in the MCP initialize handshake."""

    name: str
    """MCP server name."""
    version: str = ""
    """MCP server version."""
    protocol_version: str = ""
    """Negotiated MCP protocol version."""


MAX_SCALING_REASON = 1024


class ScalingStatus(_Status):
    """What the scaling loop last decided for an agent whose `scaling` applies (issue 53)."""

    desired_replicas: int
    """The pods the loop wants now (it writes them into the agent's Deployment)."""
    reason: Annotated[str, Field(max_length=MAX_SCALING_REASON)] = ""
    """Why the loop came to that count, in its words (its `Scaled` Event says the same)."""


class PallasAgentStatus(_Status):
    """The observed state of a PallasAgent."""

    phase: Phase = "Pending"
    """One-word summary: Pending, Waiting, Progressing, Ready, Degraded or Failed."""
    conditions: Annotated[
        list[Condition],
        Field(
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ] = Field(default_factory=list)
    """Accepted, DependenciesReady, Available, Verified, Healthy and Ready."""
    url: str | None = None
    """The agent's MCP endpoint inside the cluster."""
    model: str | None = None
    """The model id the agent runs (without the provider prefix)."""
    workflow: WorkflowType | None = None
    """The shape of its `spec.workflow` (`chain`, `parallel`, `router`, `evaluator`, `planner`),
    one word for `kubectl get -o wide` (a column cannot print a map's key); unset: no workflow."""
    replicas: int | None = None
    """Pods wanted."""
    ready_replicas: int | None = None
    """Pods ready."""
    health: Health | None = None
    """The last get_health result."""
    server_info: ServerInfo | None = None
    """The MCP server identity seen at verification."""
    tools: Annotated[list[str], Field(json_schema_extra={"x-kubernetes-list-type": "set"})] = Field(
        default_factory=list
    )
    """Tool names the agent lists over MCP."""
    config_hash: str | None = None
    """sha256 of the agent's config as the operator last wrote it into the agent's ConfigMap
    (`pallas_api.live.config_digest`); most edits apply to running pods without a restart."""
    served_config_hash: str | None = None
    """The `configHash` the agent reported serving in its last `get_health`: equal to `configHash`
    once a live edit has reached the pod that answered (absent before the first report)."""
    observed_generation: int | None = None
    """The metadata.generation the status was computed from."""
    scaling: ScalingStatus | None = None
    """The scaling loop's last decision, while `scaling` applies (absent for a fixed size)."""


class AgentCounts(_Status):
    """How many agents of the deployment there are and how they do."""

    total: int = 0
    """PallasAgents naming this deployment."""
    ready: int = 0
    """Of those, Ready."""
    healthy: int = 0
    """Of those, reporting health `ok`."""


class ProviderStatus(_Status):
    """The last check of one LLM provider of the deployment, made by its registry.

    The registry (which holds the deployment's provider keys, never the operator) checks every
    provider as the original preflight did: the models its agents use exist, and a provider no
    agent uses ("key set, not active") answers its models endpoint with the key.
    """

    name: str
    """The provider's key in `spec.providers`."""
    type: str = ""
    """Its wire protocol, `openai` or `anthropic`."""
    status: ProviderCheckStatus
    """`ok` or `error`."""
    message: str = ""
    """What the check found (what is wrong, when `error`)."""
    checked_at: str | None = None
    """When this result was first seen (RFC 3339); it moves only when the result changes."""
    models: Annotated[list[str], Field(json_schema_extra={"x-kubernetes-list-type": "atomic"})] = Field(
        default_factory=list
    )
    """Models the deployment's agents (and its default) use on it; empty: no agent uses it."""


class InUse(_Status):
    """What the deployment's agents use, so that taking it away can be refused.

    The chart's ValidatingAdmissionPolicy (`pallas-deployment-in-use`) reads it: a PallasDeployment
    with agents is not deleted, and a provider or MCP server listed here is not removed from its
    spec, unless the object carries the annotation `pallas.dev/force: "true"`.
    """

    providers: Annotated[list[str], Field(json_schema_extra={"x-kubernetes-list-type": "set"})] = Field(
        default_factory=list
    )
    """The `spec.providers` the agents' models (or the deployment's default model) name."""
    mcp_servers: Annotated[list[str], Field(json_schema_extra={"x-kubernetes-list-type": "set"})] = Field(
        default_factory=list
    )
    """The `spec.mcpServers` named in the agents' `servers`."""


class PallasDeploymentStatus(_Status):
    """The observed state of a PallasDeployment."""

    observed_generation: int | None = None
    """The metadata.generation the status was computed from."""
    conditions: Annotated[
        list[Condition],
        Field(
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ] = Field(default_factory=list)
    """Ready, RegistryAvailable and MonitoringReady."""
    agents: AgentCounts = AgentCounts()
    """Agent counts."""
    in_use: InUse = InUse()
    """The providers and MCP servers the agents use (what deletion and removal are refused for)."""
    registry_url: Annotated[str | None, Field(alias="registryURL")] = None
    """The registry's catalogue URL inside the cluster."""
    providers: Annotated[
        list[ProviderStatus],
        Field(json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    ] = Field(default_factory=list)
    """The last check of each provider, from the registry's report (docs/api.md §4)."""


RunOutcome = Literal["Running", "Succeeded", "Failed"]
RUN_OUTCOMES: tuple[RunOutcome, ...] = get_args(RunOutcome)
ANSWER_EXCERPT_CHARS = 512
"""How much of an answer a run's status keeps (status is not a transcript; the conversation is)."""


class TriggerRun(_Status):
    """One run of a PallasTrigger."""

    id: Annotated[str, Field(max_length=64)]
    """The run's id (also `.run.id` in the message template)."""
    outcome: RunOutcome
    """`Running` (recorded before the call starts, so a restart finds it), `Succeeded` or `Failed`."""
    start_time: str
    """When the run started (RFC 3339)."""
    scheduled_time: str | None = None
    """The schedule time it ran for (schedule triggers)."""
    completion_time: str | None = None
    """When it ended (RFC 3339)."""
    reason: Annotated[str | None, Field(max_length=128)] = None
    """Why it failed, CamelCase: TemplateFailed, AgentError, AgentUnreachable,
    CredentialsUnavailable, Timeout, Replaced, Interrupted."""
    message: Annotated[str | None, Field(max_length=1024)] = None
    """What went wrong, for humans (never a secret)."""
    answer_excerpt: Annotated[str | None, Field(max_length=ANSWER_EXCERPT_CHARS)] = None
    """The start of the agent's answer."""
    tokens: int | None = None
    """Tokens the run's turn spent, as the agent reported."""
    cost: float | None = None
    """What the turn cost, in the deployment's currency, as the agent reported."""
    conversation_id: Annotated[str | None, Field(alias="conversationID", max_length=256)] = None
    """The conversation the run spoke in."""


ConditionList = Annotated[
    list[Condition],
    Field(json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
]
"""Conditions keyed by type, as server-side apply merges them."""


class PallasTriggerStatus(_Status):
    """The observed state of a PallasTrigger."""

    conditions: ConditionList = Field(default_factory=list)
    """Accepted (the spec and its references hold) and Ready (it will fire)."""
    observed_generation: int | None = None
    """The metadata.generation the conditions were computed from."""
    last_run_time: str | None = None
    """When the last run started (RFC 3339)."""
    last_schedule_time: str | None = None
    """The last schedule time handled, run or skipped: where missed times are counted from."""
    next_run_time: str | None = None
    """The next schedule time (schedule triggers)."""
    skipped_runs: int = 0
    """Schedule times missed and never run (older than startingDeadlineSeconds, or not the newest
    missed), and firings skipped by concurrencyPolicy Forbid."""
    dropped_runs: int = 0
    """Firings dropped by maxRunsPerMinute."""
    runs: Annotated[list[TriggerRun], Field(max_length=201)] = Field(default_factory=list)
    """The runs in flight and the last finished ones (spec.historyLimit), newest first."""
