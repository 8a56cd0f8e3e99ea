"""The status policy of a PallasDeployment. Pure.

Registry, monitoring, access control, agent counts, and the provider checks its registry reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from pallas_api import conditions as r
from pallas_api.status import (
    AgentCounts,
    InUse,
    PallasDeploymentStatus,
    ProviderCheckStatus,
    ProviderStatus,
)
from pallas_operator.status import conditions as c
from pallas_operator.status.workload import Workload


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """One agent of the deployment, as counted."""

    ready: bool
    healthy: bool
    providers: tuple[str, ...] = ()
    """The providers its model names (its own `model`, else the deployment's default)."""
    servers: tuple[str, ...] = ()
    """Its `servers`."""


@dataclass(frozen=True, slots=True)
class ProviderCheck:
    """One provider's check as the registry reported it."""

    name: str
    type: str
    status: ProviderCheckStatus
    message: str = ""
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProviderReport:
    """What reading the registry's provider checks gave: the checks, or why there are none."""

    checks: tuple[ProviderCheck, ...] | None
    problem: str = ""


@dataclass(frozen=True, slots=True)
class HostedServer:
    """One stdio server of the deployment, as the operator hosts it (or cannot)."""

    name: str
    workload: Workload | None
    """Its Deployment as last seen; None before it exists."""
    hostable: bool = True
    """False for a stateful stdio server: a process per session needs `pallas run`."""


@dataclass(frozen=True, slots=True)
class DeploymentObservation:
    """Everything the status of one deployment is computed from."""

    generation: int
    agents: tuple[AgentSummary, ...]
    registry_enabled: bool
    registry: Workload | None
    registry_url: str | None
    monitoring_enabled: bool
    monitoring_crd_present: bool
    problem: str | None = None
    """Why the spec cannot be used at all (then nothing else is judged)."""
    auth_mode: str = "none"
    """`spec.auth.mode`."""
    public_url_template: str = ""
    """`spec.registry.publicURLTemplate`: agents published beyond the cluster."""
    providers: tuple[str, ...] = ()
    """The names of `spec.providers`."""
    provider_report: ProviderReport | None = None
    """The registry's last report (None: not read since this process started, or not due)."""
    servers: tuple[HostedServer, ...] = ()
    """The stdio servers of `spec.mcpServers`, in name order."""
    server_names: tuple[str, ...] = ()
    """The names of `spec.mcpServers`, of every kind."""


def _registry(obs: DeploymentObservation) -> c.Verdict:
    if not obs.registry_enabled:
        return c.true(c.REGISTRY_AVAILABLE, r.REGISTRY_DISABLED, "spec.registry.enabled is false")
    if obs.registry is None:
        return c.false(
            c.REGISTRY_AVAILABLE, r.DEPLOYMENT_NOT_CREATED, "the registry Deployment does not exist yet"
        )
    if obs.registry.available:
        return c.true(c.REGISTRY_AVAILABLE, r.MINIMUM_REPLICAS_AVAILABLE, obs.registry.message)
    return c.false(c.REGISTRY_AVAILABLE, r.REGISTRY_UNAVAILABLE, obs.registry.message)


def _monitoring(obs: DeploymentObservation) -> c.Verdict | None:
    if not obs.monitoring_enabled:
        return None
    if obs.monitoring_crd_present:
        return c.true(c.MONITORING_READY, r.SERVICE_MONITORS_APPLIED)
    return c.false(
        c.MONITORING_READY,
        r.SERVICE_MONITOR_CRD_NOT_FOUND,
        "monitoring.serviceMonitor.enabled is true but the monitoring.coreos.com ServiceMonitor CRD is not "
        "installed: install the Prometheus Operator CRDs or disable it",
    )


def servers_available(obs: DeploymentObservation) -> c.Verdict | None:
    """Whether every hosted stdio server's bridge is Ready; advice, never a blocker of Ready.

    Absent when the deployment has no stdio server. A stateful one is not hosted in a cluster
    (its agents are not accepted, `StdioServerNotHostable`), and said so here too.
    """
    if not obs.servers:
        return None
    problems = []
    for server in obs.servers:
        if not server.hostable:
            problems.append(f"{server.name}: stateful stdio servers run only under pallas run (not hosted)")
        elif server.workload is None:
            problems.append(f"{server.name}: its Deployment does not exist yet")
        elif not server.workload.available:
            problems.append(f"{server.name}: {server.workload.message}")
    if problems:
        return c.false(c.SERVERS_AVAILABLE, r.SERVERS_UNAVAILABLE, "; ".join(problems))
    return c.true(c.SERVERS_AVAILABLE, r.SERVERS_AVAILABLE_REASON, f"{len(obs.servers)} stdio servers ready")


def authenticated(obs: DeploymentObservation) -> c.Verdict:
    """Who may talk to the agents; `Unauthenticated` when anyone may, at a public URL."""
    if obs.auth_mode == "kubernetes":
        return c.true(
            c.AUTHENTICATED,
            r.KUBERNETES_AUTH,
            "callers need a Kubernetes token and RBAC verb invoke on pallasagents/<agent>",
        )
    if obs.auth_mode == "oidc":
        return c.true(c.AUTHENTICATED, r.OIDC_AUTH, "callers need a JWT of spec.auth.oidc.issuer")
    if obs.public_url_template:
        return c.false(
            c.AUTHENTICATED,
            r.UNAUTHENTICATED,
            f"spec.auth.mode is none and the registry publishes agents at {obs.public_url_template}: "
            "anyone who reaches that URL can talk to them and spend the deployment's LLM tokens; set "
            "spec.auth.mode to kubernetes or oidc",
        )
    return c.false(
        c.AUTHENTICATED,
        r.AUTH_DISABLED,
        "spec.auth.mode is none: anything that reaches an agent's Service can talk to it",
    )


def _provider_statuses(
    obs: DeploymentObservation, previous: PallasDeploymentStatus, now: str
) -> list[ProviderStatus]:
    """The reported checks of the spec's providers; the last known ones while there is no report.

    `checkedAt` moves only when a provider's result changes (as an agent's `health.checkedAt`), so
    an unchanged report costs no status write.
    """
    report = obs.provider_report
    if not obs.registry_enabled:
        return []
    if report is None or report.checks is None:
        return [p for p in previous.providers if p.name in obs.providers]
    before = {p.name: p for p in previous.providers}
    out = []
    for check in sorted(report.checks, key=lambda check: check.name):
        if check.name not in obs.providers:
            continue
        entry = ProviderStatus(
            name=check.name,
            type=check.type,
            status=check.status,
            message=check.message,
            models=list(check.models),
            checked_at=now,
        )
        old = before.get(check.name)
        if old is not None and old.model_copy(update={"checked_at": now}) == entry:
            entry = old
        out.append(entry)
    return out


def providers_healthy(obs: DeploymentObservation, checked: list[ProviderStatus]) -> c.Verdict:
    """Whether every provider passed the registry's check; advice, never a blocker of Ready."""
    if not obs.registry_enabled:
        return c.unknown(
            c.PROVIDERS_HEALTHY,
            r.REGISTRY_DISABLED,
            "providers are checked by the registry, and spec.registry.enabled is false",
        )
    failed = [p for p in checked if p.status != "ok"]
    if failed:
        return c.false(
            c.PROVIDERS_HEALTHY, r.PROVIDER_CHECK_FAILED, "; ".join(p.message or p.name for p in failed)
        )
    report = obs.provider_report
    if len(checked) < len(obs.providers):
        missing = sorted(set(obs.providers) - {p.name for p in checked})
        why = f": {report.problem}" if report is not None and report.problem else ""
        return c.unknown(
            c.PROVIDERS_HEALTHY,
            r.PROVIDERS_NOT_CHECKED,
            f"the registry has not reported on {', '.join(missing)} yet{why}",
        )
    return c.true(c.PROVIDERS_HEALTHY, r.PROVIDERS_OK, f"{len(checked)} providers checked by the registry")


def in_use(obs: DeploymentObservation) -> InUse:
    """The providers and servers of the spec some agent uses: what removing is refused for.

    Names an agent uses that the spec lacks are left out: the admission policy compares this
    with the new spec, and must not refuse an edit for something already gone.
    """
    return InUse(
        providers=sorted({p for a in obs.agents for p in a.providers} & set(obs.providers)),
        mcp_servers=sorted({s for a in obs.agents for s in a.servers} & set(obs.server_names)),
    )


def deployment_status(
    obs: DeploymentObservation, previous: PallasDeploymentStatus, now: str
) -> PallasDeploymentStatus:
    """The status to write for a deployment, given what was observed and the status written before."""
    counts = AgentCounts(
        total=len(obs.agents),
        ready=sum(a.ready for a in obs.agents),
        healthy=sum(a.healthy for a in obs.agents),
    )
    if obs.problem is not None:
        return PallasDeploymentStatus(
            observed_generation=obs.generation,
            conditions=c.stamp(
                [c.false(c.READY, r.INVALID_SPEC, obs.problem)], previous.conditions, obs.generation, now
            ),
            agents=counts,
            in_use=in_use(obs),
        )
    registry = _registry(obs)
    monitoring = _monitoring(obs)
    if not registry.true:
        ready = c.false(c.READY, r.REGISTRY_UNAVAILABLE, registry.message)
    elif counts.ready < counts.total:
        ready = c.false(c.READY, r.AGENTS_NOT_READY, f"{counts.ready}/{counts.total} agents ready")
    else:
        ready = c.true(c.READY, r.ALL_AGENTS_READY, f"{counts.ready}/{counts.total} agents ready")
    providers = _provider_statuses(obs, previous, now)
    verdicts = [ready, registry, authenticated(obs), providers_healthy(obs, providers)]
    verdicts += [monitoring] if monitoring is not None else []
    servers = servers_available(obs)
    verdicts += [servers] if servers is not None else []
    return PallasDeploymentStatus(
        observed_generation=obs.generation,
        conditions=c.stamp(verdicts, previous.conditions, obs.generation, now),
        agents=counts,
        in_use=in_use(obs),
        registry_url=obs.registry_url if obs.registry_enabled else None,
        providers=providers,
    )
