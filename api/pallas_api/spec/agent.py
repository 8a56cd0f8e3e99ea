"""The PallasAgent spec: one LLM agent of a deployment, served as one MCP endpoint.

An agent names what it uses from its deployment (a model, servers, A2A agents) and the other
agents it calls; the rest is its own: the instruction, request parameters, tool policy, limits,
its Service and pods, and who may call it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from pallas_api.fields import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_MAX_DEPTH,
    ONCE,
    SET,
    CallParams,
    ConversationScope,
    DrainSeconds,
    InputLimits,
    MaxDepth,
    MaxHistoryBytes,
    RequestParams,
    SessionLimits,
    ToolPolicy,
)
from pallas_api.names import DNS_LABEL, LABEL_AGENT, LABEL_COMPONENT
from pallas_api.spec.common import (
    ICON_SRC,
    MODEL_REF,
    EnvVar,
    LabelKey,
    LabelSelector,
    LogLevel,
    NameList,
    ResourceRequirements,
    ScalingSpec,
    SpecModel,
    Toleration,
    ToolExposureSpec,
)
from pallas_api.spending import BudgetsSpec
from pallas_api.urls import PUBLISHED, WithoutCredentials
from pallas_api.workflow import WorkflowSpec

AGENT_SELECTOR_KEYS = frozenset({LABEL_AGENT, LABEL_COMPONENT})
"""The label keys of an agent's pod selector, which a constraint without `labelSelector` gets."""


class TopologySpreadConstraint(SpecModel):
    """How an agent's pods spread over a topology (a Kubernetes TopologySpreadConstraint)."""

    max_skew: Annotated[int, Field(ge=1, le=1000)]
    """The most by which the number of matching pods in one domain may exceed the fewest in any."""
    topology_key: LabelKey
    """Node label whose values are the domains, e.g. `kubernetes.io/hostname` or
    `topology.kubernetes.io/zone`."""
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    """`DoNotSchedule` leaves a pod Pending rather than break the skew; `ScheduleAnyway` only
    prefers the nodes that keep it."""
    label_selector: LabelSelector | None = None
    """The pods counted; default: this agent's own pods."""
    match_label_keys: Annotated[list[LabelKey], Field(max_length=16), SET, ONCE] = Field(default_factory=list)
    """Labels of the incoming pod whose values narrow the pods counted, e.g. `pod-template-hash`
    so the new ReplicaSet of a rollout spreads on its own. Not a key of the selector."""
    min_domains: Annotated[int | None, Field(ge=1, le=1000)] = None
    """The fewest eligible domains (with `DoNotSchedule` only)."""
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    """Whether the pod's nodeSelector and node affinity limit the domains counted (Kubernetes
    default: Honor)."""
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    """Whether nodes whose taints the pod does not tolerate are left out (Kubernetes default:
    Ignore)."""

    @model_validator(mode="after")
    def _as_kubernetes_accepts(self) -> Self:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains needs whenUnsatisfiable DoNotSchedule")
        selector = self.label_selector
        if selector is None:
            selected = set(AGENT_SELECTOR_KEYS)
        else:
            selected = {*selector.match_labels, *(e.key for e in selector.match_expressions)}
        if both := sorted(selected.intersection(self.match_label_keys)):
            raise ValueError(f"matchLabelKeys {both[0]!r} is also a key of the label selector")
        return self


def _one_per_topology(constraints: list[TopologySpreadConstraint]) -> list[TopologySpreadConstraint]:
    seen: set[tuple[str, str]] = set()
    for c in constraints:
        if (key := (c.topology_key, c.when_unsatisfiable)) in seen:
            raise ValueError(f"two constraints with topologyKey {key[0]!r} and whenUnsatisfiable {key[1]}")
        seen.add(key)
    return constraints


TopologySpreadConstraints = Annotated[
    list[TopologySpreadConstraint],
    Field(
        max_length=8,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["topologyKey", "whenUnsatisfiable"],
        },
    ),
    AfterValidator(_one_per_topology),
]
"""Keyed as a pod's list is, by topologyKey and whenUnsatisfiable: server-side apply refuses a
repeated key there, and the API server refuses it here."""


class Icon(SpecModel):
    """An icon shown by clients (MCP registry `icons`)."""

    src: Annotated[str, Field(pattern=ICON_SRC, min_length=1, max_length=2048), WithoutCredentials(PUBLISHED)]
    """Icon URL: https, a data: URI, or relative (`/icons/research.svg`, resolved against the
    registry's public URL)."""
    mime_type: Annotated[str | None, Field(pattern=r"^image/[A-Za-z0-9.+-]+$")] = None
    """MIME type, e.g. image/svg+xml."""
    sizes: Annotated[list[Annotated[str, Field(pattern=r"^(any|[0-9]+x[0-9]+)$")]], Field(max_length=16)] = (
        Field(default_factory=list)
    )
    """Sizes, e.g. `["48x48"]` or `["any"]`."""
    theme: Literal["light", "dark"] | None = None
    """Background theme the icon is designed for."""


class ServiceSpec(SpecModel):
    """The agent's Service."""

    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """Service and container port."""
    session_affinity: Literal["ClientIP", "None"] = "ClientIP"
    """ClientIP keeps a client on one pod (MCP sessions are stateful); None turns it off."""


class AgentPodSpec(SpecModel):
    """Pod settings of one agent (over the deployment's runtime defaults)."""

    resources: ResourceRequirements | None = None
    """Container resources."""
    env: Annotated[list[EnvVar], Field(max_length=64)] = Field(default_factory=list)
    """Extra environment variables (Kubernetes EnvVar objects)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node selector."""
    tolerations: Annotated[list[Toleration], Field(max_length=32)] = Field(default_factory=list)
    """Tolerations (Kubernetes Toleration objects). One for `node.kubernetes.io/unreachable` or
    `node.kubernetes.io/not-ready` replaces the operator's for that taint (the deployment's
    `runtime.nodeFailureTolerationSeconds`)."""
    topology_spread_constraints: TopologySpreadConstraints | None = None
    """How the pods spread over nodes or zones (Kubernetes TopologySpreadConstraints; without a
    `labelSelector` one counts this agent's pods). Unset: with more than one replica, at most one
    pod more on one node than on another, preferred, not required (`kubernetes.io/hostname`,
    `ScheduleAnyway`, each rollout's pods counted on their own); `[]`: no constraint."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Pod annotations."""
    drain_seconds: DrainSeconds | None = None
    """Seconds a stopping pod lets its turns in flight finish (0 to 3600); default: the
    deployment's `runtime.drainSeconds`."""


class AgentConversationsSpec(SpecModel):
    """How this agent keeps conversations, over the deployment's `conversations`."""

    scope: ConversationScope | None = None
    """`caller`, `session` or `request`; default: the deployment's `conversations.scope`."""


class AgentHistorySpec(SpecModel):
    """Conversation history kept by this agent."""

    max_messages: Annotated[int | None, Field(gt=0, le=100_000)] = None
    """Messages kept per conversation; default: the deployment's `conversations.maxMessages`."""
    max_conversations: Annotated[int, Field(gt=0, le=1_000_000)] = 1000
    """Conversations kept per pod by the memory store (least recently used dropped first)."""
    max_bytes: MaxHistoryBytes = DEFAULT_HISTORY_BYTES
    """Bytes of conversations one pod keeps in memory (1 MiB to 64 GiB; default 64 MiB): the
    memory store's conversations, a database store's cached transcripts. Least recently used
    ones go first (never one a turn is using), and a conversation that alone weighs more loses
    its oldest turns. The pod's default memory limit grows with it (docs/api.md)."""


CallerList = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=512)]], Field(max_length=256), SET, ONCE
]
"""Subjects or groups of callers, each named once."""


class AccessSpec(SpecModel):
    """Which authenticated callers may talk to one agent (both lists empty or absent: everyone)."""

    subjects: CallerList = Field(default_factory=list)
    """Callers allowed by name: the OIDC subject claim, or the Kubernetes user name
    (`system:serviceaccount:<ns>:<name>` for a ServiceAccount)."""
    groups: CallerList = Field(default_factory=list)
    """Callers allowed by group: the OIDC groups claim, or the Kubernetes groups."""

    @property
    def restricted(self) -> bool:
        """Whether the lists name anyone (empty lists admit every authenticated caller)."""
        return bool(self.subjects or self.groups)


class A2ASpec(SpecModel):
    """The agent's A2A surface (docs/api.md §3 "A2A")."""

    enabled: bool = True
    """Serve the Agent Card at `/.well-known/agent-card.json` and A2A's JSON-RPC binding at
    `/a2a` beside MCP; false turns both off."""


class PallasAgentSpec(SpecModel):
    """One LLM agent, served as one MCP endpoint."""

    deployment: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    """The PallasDeployment in the same namespace this agent belongs to (immutable)."""
    title: Annotated[str, Field(max_length=200)] = ""
    """Display name; default: the name in title case."""
    description: Annotated[str, Field(max_length=100)] = ""
    """One line shown by clients (at most 100 characters, as in the MCP registry schema)."""
    icons: Annotated[list[Icon], Field(max_length=8)] = Field(default_factory=list)
    """Icons for clients."""
    instruction: Annotated[str, Field(max_length=262144)] = ""
    """The system prompt."""
    model: Annotated[str | None, Field(pattern=MODEL_REF, max_length=253)] = None
    """`<provider>.<model>` overriding the deployment's default."""
    servers: NameList = Field(default_factory=list)
    """Names from the deployment's mcpServers this agent may use."""
    agents: NameList = Field(default_factory=list)
    """Other PallasAgents usable as tools (they are also dependencies)."""
    depends_on: NameList = Field(default_factory=list)
    """Agents that must be Ready before this one starts."""
    a2a_agents: Annotated[NameList, Field(alias="a2aAgents")] = Field(default_factory=list)
    """Names from the deployment's `a2aAgents` (external A2A agents) usable as tools, like
    `agents`; they are not dependencies (an external agent has no Ready condition)."""
    request_params: RequestParams = RequestParams()
    """Sampling parameters; those a provider does not support are dropped with a warning."""
    call_params: CallParams = CallParams()
    """What a `send_message` call's own `params` may set: `allow` (parameters; default all of
    them) and `extra` (provider fields in `params.extra`; default none). Anything else is
    refused with INVALID_ARGUMENTS; `requestParams` (including its `extra`) always applies."""
    max_iterations: Annotated[int, Field(gt=0, le=1000)] = 12
    """LLM/tool rounds per send_message."""
    max_depth: MaxDepth = DEFAULT_MAX_DEPTH
    """The most agents a chain of agent-to-agent calls through this agent may have (the first
    caller counts as 1). A call that would go deeper, or reach an agent already in its path,
    is refused with a clear error: models decide at run time whom they call, so dependency
    cycle checks cannot see every loop."""
    tools: ToolPolicy = ToolPolicy()
    """Allow/deny globs over `<server>__<tool>`."""
    tool_exposure: ToolExposureSpec = ToolExposureSpec()
    """How downstream tools reach this agent's model; each field set overrides the deployment's."""
    history: AgentHistorySpec = AgentHistorySpec()
    """Conversation history limits."""
    conversations: AgentConversationsSpec = AgentConversationsSpec()
    """What a call without `conversation_id` continues (overrides the deployment's scope)."""
    limits: InputLimits = InputLimits()
    """Limits on what one send_message may carry."""
    capabilities: Annotated[
        list[Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]],
        Field(max_length=32),
        SET,
        ONCE,
    ] = Field(default_factory=list)
    """Discovery tags (registry `?capability=`)."""
    replicas: Annotated[int | None, Field(ge=0, le=100)] = None
    """Pods serving this agent, a fixed number (default 1, or the deployment's `scaling` when it
    has one); not together with `scaling`."""
    scaling: ScalingSpec | None = None
    """Pods that follow the agent's use, between `minReplicas` and `maxReplicas` (docs/api.md
    "Scaling"); replaces the deployment's `scaling` as a whole. Not together with `replicas`."""
    busy_at: Annotated[int | None, Field(ge=1, le=100_000)] = None
    """A pod with at least this many send_message calls in flight reports itself busy (in
    `get_health` and as the registry status `busy`); it still takes calls. Default: never busy."""
    sessions: SessionLimits = SessionLimits()
    """MCP sessions each pod keeps open: `maxSessions` (default 1000, about 40 MiB), and with
    inbound auth `maxPerCaller` (default 32); when full, the session idle longest is closed to
    make room. `idleTimeoutSeconds` (default 1800) closes sessions nobody uses."""
    service: ServiceSpec = ServiceSpec()
    """The agent's Service."""
    pod: AgentPodSpec = AgentPodSpec()
    """Pod settings."""
    access: AccessSpec = AccessSpec()
    """Callers allowed beyond the deployment's auth mode: with `oidc`, the subjects and groups
    that may call; with `kubernetes`, a further restriction on top of RBAC `invoke`."""
    budgets: BudgetsSpec = BudgetsSpec()
    """Budgets of spend over the deployment's, field by field: `agent`, `perCaller`, `warnAt`,
    `callerMetrics`."""
    log_level: LogLevel | None = None
    """Log level of the Pallas loggers in this agent's pods (`PALLAS_LOG_LEVEL`); default: the
    deployment's `logLevel`, else info."""
    a2a: Annotated[A2ASpec, Field(alias="a2a")] = A2ASpec()
    """The A2A surface beside MCP: the Agent Card and the JSON-RPC endpoint (on by default)."""
    workflow: WorkflowSpec | None = None
    """A declared pipeline over other agents answering each `send_message` in place of the
    LLM/tool loop: exactly one of `chain`, `parallel`, `router`, `evaluator`, `planner`
    (docs/api.md "Workflows"). Its steps are PallasAgents of the deployment (implied
    dependencies) or names from `a2aAgents`."""

    @model_validator(mode="after")
    def _one_size(self) -> Self:
        if self.replicas is not None and self.scaling is not None:
            raise ValueError(
                "set either replicas (a fixed number of pods) or scaling (pods that follow the "
                "agent's use), not both; remove one of them"
            )
        return self

    @property
    def fixed_replicas(self) -> int:
        """The pods of an agent of fixed size: `replicas`, default 1."""
        return 1 if self.replicas is None else self.replicas

    def scaling_with(self, default: ScalingSpec | None) -> ScalingSpec | None:
        """The scaling that applies, given the deployment's `default`.

        The agent's own; none when it sets `replicas` (a fixed size overrides the deployment's
        scaling); else the deployment's.
        """
        if self.scaling is not None or self.replicas is not None:
            return self.scaling
        return default

    def peers(self) -> list[str]:
        """The PallasAgents this agent calls: `agents`, then workflow steps not in `a2aAgents`."""
        steps = self.workflow.steps() if self.workflow is not None else []
        return list(dict.fromkeys([*self.agents, *(s for s in steps if s not in self.a2a_agents)]))

    def dependencies(self) -> list[str]:
        """Agents that must be Ready first: `agents`, workflow steps and `dependsOn`, without repeats."""
        return agent_dependencies(self.peers(), self.depends_on)


def agent_dependencies(agents: Iterable[str], depends_on: Iterable[str]) -> list[str]:
    """Agents that must be Ready first: the agents called and `dependsOn`, in order, without repeats."""
    return list(dict.fromkeys([*agents, *depends_on]))
