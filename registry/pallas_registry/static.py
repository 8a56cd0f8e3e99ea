"""The static source for `pallas run -f`: local agents, with live health from their `get_health`.

The agents come from the manifests (`update` swaps in a new list on `pallas run --reload`); what
changes between reloads is their state, polled over MCP: every `poll_interval` seconds each agent
is asked for `tools/list` and `get_health` (in parallel, bounded by `probe_timeout`), at
`startup_interval` while some agent has not answered yet so the catalogue fills as soon as agents
come up. Phases: `Pending` until the first answer, then
`Ready` (ok), `Degraded` (degraded: still usable; error: not), `Failed` when it stops answering.

Remotes are the loopback URLs given; the deployment's `publicURLTemplate` is for clusters and is
not applied here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from pallas_api.spec import CallerAuth, PallasAgentSpec, PallasDeploymentSpec, ProviderSpec
from pallas_io.probe import ProbeOutcome, probe
from pallas_registry.catalogue import CatalogueStore
from pallas_registry.providers import ProviderTarget, deployment_targets
from pallas_registry.source import CatalogueSource
from pallas_registry.state import AgentState, HealthView, ProviderView, utcnow


@dataclass(frozen=True, slots=True)
class LocalAgent:
    """One agent `pallas run` serves: its manifests and where it listens."""

    name: str
    spec: PallasAgentSpec
    deployment: PallasDeploymentSpec
    url: str
    deployment_name: str = ""
    namespace: str = "default"


@dataclass(frozen=True, slots=True)
class Observation:
    """What one probe of an agent found."""

    reachable: bool
    health: HealthView
    tools: tuple[str, ...] = ()


NO_TOKEN = (
    "asks for a bearer token, and this registry has none that it accepts: give `pallas run` one "
    "(--token, PALLAS_TOKEN or --as-serviceaccount) to see its tools and health"
)


def observation(outcome: ProbeOutcome, now: datetime) -> Observation:
    """What a probe of a local agent found, as the catalogue shows it."""
    if not outcome.ok and outcome.unauthorized:
        # It serves and wants a token: usable by callers that have one, opaque to this registry.
        return Observation(True, HealthView("degraded", NO_TOKEN, now))
    if not outcome.ok:
        return Observation(False, HealthView("error", f"unreachable: {outcome.message}"[:300], now))
    report = outcome.health
    if report is None:
        problem = outcome.health_problem or "get_health did not return a health report"
        return Observation(True, HealthView("error", problem[:300], now), outcome.tools)
    health = HealthView(
        report.status, report.message or "", report.checked_at or now, bool(report.busy), report.spend
    )
    return Observation(True, health, outcome.tools)


async def probe_agent(url: str, time_limit: float, headers: Mapping[str, str] | None = None) -> Observation:
    """Ask the agent at `url` for its tools and `get_health`, within `time_limit` seconds in total."""
    now = utcnow()
    outcome = await probe(url, time_limit=time_limit, list_tools=True, get_health=True, headers=headers)
    return observation(outcome, now)


def _local_targets(
    agents: Sequence[LocalAgent], keys: Mapping[tuple[str, str, str], str], openai_base_url: str | None
) -> list[ProviderTarget]:
    deployments: dict[tuple[str, str], list[LocalAgent]] = {}
    for agent in agents:
        deployments.setdefault((agent.namespace, agent.deployment_name), []).append(agent)
    targets = []
    for (namespace, name), members in deployments.items():
        spec = members[0].deployment
        models = [spec.model.default, *(a.spec.model or spec.model.default for a in members)]

        def key(provider: str, _: ProviderSpec, namespace: str = namespace, name: str = name) -> str | None:
            return keys.get((namespace, name, provider))

        targets += deployment_targets(
            name, spec.providers, models, key, local=True, openai_base_url=openai_base_url
        )
    return targets


def base_state(agent: LocalAgent, registry_url: str = "") -> AgentState:
    """The spec-derived part of a local agent's state (Pending, not probed yet).

    `registry_url` is where this registry listens: relative icons resolve against it.
    """
    spec, deployment = agent.spec, agent.deployment
    model_ref = spec.model or deployment.model.default
    provider_name = model_ref.partition(".")[0]
    provider = deployment.providers.get(provider_name)
    return AgentState(
        name=agent.name,
        namespace=agent.namespace,
        deployment=agent.deployment_name,
        title=spec.title,
        description=spec.description,
        icons=tuple(spec.icons),
        tags=tuple(spec.capabilities),
        model_ref=model_ref,
        model_capabilities=deployment.model.capabilities_of(model_ref),
        auth=CallerAuth.of(deployment.auth),
        auth_spec=deployment.auth,
        access=spec.access,
        provider=ProviderView.of(provider_name, provider) if provider else ProviderView(),
        version=deployment.version,
        name_prefix=deployment.registry.name_prefix,
        registry_url=registry_url,
        url=agent.url,
        service_port=spec.service.port,
        a2a=spec.a2a.enabled,
        workflow=spec.workflow.type if spec.workflow is not None else None,
    )


def observed_state(previous: AgentState, seen: Observation, now: datetime) -> AgentState:
    """`previous` updated with one probe; timestamps move only when something visible changed."""
    if seen.reachable:
        status = seen.health.status
        phase = "Ready" if status == "ok" else "Degraded"
        ready = status != "error"
        tools = seen.tools
    else:
        phase = "Pending" if previous.phase == "Pending" else "Failed"
        ready = False
        tools = previous.tools
    message = "" if ready else seen.health.message
    state = replace(
        previous, phase=phase, ready=ready, status_message=message, health=seen.health, tools=tools
    )
    visible = (phase, ready, message, seen.health.status, seen.health.message, seen.health.busy, tools)
    before = (
        previous.phase,
        previous.ready,
        previous.status_message,
        previous.health.status if previous.health else None,
        previous.health.message if previous.health else None,
        previous.health.busy if previous.health else None,
        previous.tools,
    )
    if visible == before:
        # Keep checkedAt of the earlier report too: a new timestamp alone is not a change.
        return replace(state, health=previous.health)
    ready_changed = now if ready != previous.ready else previous.ready_changed_at
    return replace(state, updated_at=now, ready_changed_at=ready_changed)


class StaticSource(CatalogueSource):
    """Local agents whose state comes from polling their MCP endpoints."""

    def __init__(
        self,
        agents: Sequence[LocalAgent],
        *,
        poll_interval: float = 5.0,
        startup_interval: float = 0.5,
        probe_timeout: float = 5.0,
        store: CatalogueStore | None = None,
        headers: Mapping[str, str] | None = None,
        registry_url: str = "",
        provider_keys: Mapping[tuple[str, str, str], str] | None = None,
        openai_base_url: str | None = None,
    ) -> None:
        """Publish `agents` as Pending; `run()` starts polling them.

        Args:
            agents: The local agents, in manifest order.
            poll_interval: Seconds between polls once every agent has answered.
            startup_interval: Seconds between polls while some agent has never answered.
            probe_timeout: Budget of one agent's probe (tools/list + get_health), in seconds.
            store: The store to fill; default: a new one.
            headers: Sent with every probe (the bearer `pallas run` was given); never logged.
            registry_url: This registry's own URL, which relative icon `src` values resolve
                against (`registry.publicURL` is for clusters, as `publicURLTemplate`).
            provider_keys: (namespace, deployment, provider) → API key, for the provider checks
                (from Secret manifests or the environment, as the agents' keys).
            openai_base_url: `$OPENAI_BASE_URL`, the endpoint of openai providers without one.
        """
        super().__init__(store)
        self.agents: list[LocalAgent] = []
        self._states: dict[str, AgentState] = {}
        self._registry_url = registry_url
        self._openai_base_url = openai_base_url
        self._poll_interval = poll_interval
        self._startup_interval = startup_interval
        self._probe_timeout = probe_timeout
        self._headers = dict(headers or {})
        self._answered: set[str] = set()
        self._providers: list[ProviderTarget] = []
        self.update(agents, provider_keys or {})

    def update(self, agents: Sequence[LocalAgent], provider_keys: Mapping[tuple[str, str, str], str]) -> None:
        """Serve `agents` from now on (`pallas run --reload`): new ones Pending, gone ones removed.

        An agent whose manifests and URL are unchanged keeps its state (no flap to Pending), so a
        reload that adds one agent changes only that agent's entry.
        """
        now = utcnow()
        before = {a.name: a for a in self.agents}
        self._states = {
            a.name: self._states[a.name]
            if before.get(a.name) == a
            else replace(base_state(a, self._registry_url), published_at=now, updated_at=now)
            for a in agents
        }
        self.agents = list(agents)
        self._answered &= {a.name for a in self.agents if before.get(a.name) == a}
        self._providers = _local_targets(self.agents, provider_keys, self._openai_base_url)
        self.store.replace(self._states.values())

    def provider_targets(self) -> list[ProviderTarget]:
        """Every provider of the run's deployments (fixed: the manifests do not change)."""
        return self._providers

    async def refresh(self) -> None:
        """Probe every agent once and publish what was found."""
        agents = self.agents
        observations = await asyncio.gather(
            *(probe_agent(a.url, self._probe_timeout, self._headers) for a in agents)
        )
        if agents is not self.agents:
            return  # updated meanwhile: what was probed is not what is served; the next poll is
        now = utcnow()
        for agent, seen in zip(agents, observations, strict=True):
            if seen.reachable:
                self._answered.add(agent.name)
            state = observed_state(self._states[agent.name], seen, now)
            self._states[agent.name] = state
            self.store.upsert(state)
        self._connected = all(seen.reachable for seen in observations)
        self.mark_ready()

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await self.refresh()
            starting = len(self._answered) < len(self.agents)
            await asyncio.sleep(self._startup_interval if starting else self._poll_interval)
