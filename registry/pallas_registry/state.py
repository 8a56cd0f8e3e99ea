"""What the catalogue is built from: one provider-neutral record per agent.

Both sources (the Kubernetes watch and the local `pallas run` poller) reduce what they observe to
an `AgentState`; the builder never sees a Kubernetes object or an MCP client. Spec-derived fields
come first, status-derived ones after; every field has a safe default so a source fills in only
what it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pallas_api.fields import ModelCapabilities
from pallas_api.health import HealthStatus
from pallas_api.spec import AccessSpec, AuthSpec, CallerAuth, Icon, ProviderSpec
from pallas_api.spending import SpendReport


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (the clock every source uses)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class HealthView:
    """The agent's last `get_health` answer as its status (or a local probe) reports it."""

    status: HealthStatus
    message: str = ""
    checked_at: datetime | None = None
    busy: bool = False
    """The agent said it has `busyAt` calls in flight or more."""
    spend: SpendReport | None = None
    """What the agent spent in its agent budget's window (None: no such budget)."""


VENDOR_NAMES = {
    "openai": "OpenAI",
    "anthropic": "Anthropic",
    "gemini": "Google Gemini",
    "bedrock": "Amazon Bedrock",
}
"""Display names of the vendors' public APIs (a provider without `baseURL`)."""


@dataclass(frozen=True, slots=True)
class ProviderView:
    """The agent's provider as clients discovering it see it (docs/registry.md, "Provider entries").

    Capabilities are resolved here (declared, else the wire protocol's), except `vision`: None
    means "as the agent's model", which only the builder knows.
    """

    type: str = ""
    """Wire protocol (`openai`/`anthropic`); empty when the deployment could not be read."""
    display_name: str = ""
    """Empty: the provider's key."""
    description: str = ""
    streaming: bool = True
    tools: bool = True
    vision: bool | None = None
    json_mode: bool = False

    @classmethod
    def of(cls, name: str, spec: ProviderSpec) -> ProviderView:
        """The view of provider `name` of a deployment."""
        caps = spec.capabilities
        cloud = {"bedrock": "Amazon Bedrock", "vertex": "Vertex AI"}.get(spec.platform)
        default_name = cloud or (VENDOR_NAMES.get(spec.type, name) if spec.base_url is None else name)
        return cls(
            type=spec.type,
            display_name=spec.display_name or default_name,
            description=spec.description,
            streaming=True if caps.streaming is None else caps.streaming,
            tools=True if caps.tools is None else caps.tools,
            vision=caps.vision,
            json_mode=spec.type in ("openai", "gemini") if caps.json_mode is None else caps.json_mode,
        )


@dataclass(frozen=True, slots=True)
class AgentState:
    """Everything the catalogue needs to know about one agent.

    Attributes:
        name: The agent's name (PallasAgent `metadata.name`).
        namespace: Its namespace; the default name prefix derives from it.
        deployment: The PallasDeployment it belongs to.
        title: Display title; empty means "the name in title case".
        description: One line; empty means a generated one.
        icons: Icons from the spec (the builder drops those the registry schema would refuse).
        tags: Discovery tags (`spec.capabilities`).
        model_ref: The configured model, `<provider>.<model>` (agent override or deployment default).
        model_capabilities: What its model can do (`model.capabilities`, or its entry in `model.models`).
        provider: The model's provider as published (type, display name, capabilities).
        choices: The other models a call may pick with `params.model`, `<provider>.<model>` and
            what each can do: every model the deployment declares (docs/api.md §3).
        other_providers: The views of the providers serving `choices` besides `provider`.
        version: The deployment's `spec.version`.
        name_prefix: The deployment's `registry.namePrefix`; None derives one from the namespace.
        public_url_template: The deployment's `registry.publicURLTemplate` ("" = use `url`).
        registry_url: The registry's public URL (its `registry.publicURL`, else its cluster URL),
            which relative icon `src` values resolve against; "" leaves them out.
        service_port: The agent Service port, for the cluster DNS URL when status has none yet.
        auth: What a client must present to talk to the agent.
        auth_spec: Its deployment's `spec.auth` whole: how the fleet endpoint checks a caller as
            the agent itself does.
        access: Its `spec.access`: who among authenticated callers may talk to it.
        phase: `status.phase`.
        ready: Whether clients should use the agent now (what `?ready=true` keeps).
        status_message: Why it is not ready (the Ready condition's message), for `statusMessage`.
        health: The last health check.
        tools: Tool names the agent serves (`status.tools`).
        url: The agent's MCP URL (`status.url`).
        model: The model id the agent reports (`status.model`).
        published_at: When the agent first appeared (creation time).
        updated_at: When anything about it last changed.
        ready_changed_at: When `ready` last flipped (the Ready condition's transition time).
        deleting: The agent is being deleted.
        a2a: It serves A2A (`spec.a2a.enabled`).
        workflow: Its workflow's shape (`spec.workflow`), None for an ordinary agent.
    """

    name: str
    namespace: str = "default"
    deployment: str = ""
    title: str = ""
    description: str = ""
    icons: tuple[Icon, ...] = ()
    tags: tuple[str, ...] = ()
    model_ref: str = ""
    model_capabilities: ModelCapabilities = field(default_factory=ModelCapabilities)
    provider: ProviderView = field(default_factory=ProviderView)
    choices: tuple[tuple[str, ModelCapabilities], ...] = ()
    other_providers: Mapping[str, ProviderView] = field(default_factory=dict)
    version: str = "1.0.0"
    name_prefix: str | None = None
    public_url_template: str = ""
    registry_url: str = ""
    service_port: int = 8000
    auth: CallerAuth = field(default_factory=CallerAuth)
    auth_spec: AuthSpec = field(default_factory=AuthSpec)
    access: AccessSpec = field(default_factory=AccessSpec)
    phase: str = "Pending"
    ready: bool = False
    status_message: str = ""
    health: HealthView | None = None
    tools: tuple[str, ...] = ()
    url: str | None = None
    model: str | None = None
    published_at: datetime | None = None
    updated_at: datetime | None = None
    ready_changed_at: datetime | None = None
    deleting: bool = False
    a2a: bool = True
    """It serves A2A beside MCP (`spec.a2a.enabled`): its entry names its Agent Card."""
    workflow: str | None = None
    """The shape of its `spec.workflow` (chain, parallel, router, evaluator, planner), if any."""

    @property
    def key(self) -> tuple[str, str]:
        """Identity within a source: (namespace, name)."""
        return (self.namespace, self.name)
