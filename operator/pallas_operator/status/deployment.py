"""The status policy of a PallasDeployment: registry, monitoring, access control, agent counts. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from pallas_api import conditions as r
from pallas_api.status import AgentCounts, PallasDeploymentStatus
from pallas_operator.status import conditions as c
from pallas_operator.status.workload import Workload


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """One agent of the deployment, as counted."""

    ready: bool
    healthy: bool


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
        )
    registry = _registry(obs)
    monitoring = _monitoring(obs)
    if not registry.true:
        ready = c.false(c.READY, r.REGISTRY_UNAVAILABLE, registry.message)
    elif counts.ready < counts.total:
        ready = c.false(c.READY, r.AGENTS_NOT_READY, f"{counts.ready}/{counts.total} agents ready")
    else:
        ready = c.true(c.READY, r.ALL_AGENTS_READY, f"{counts.ready}/{counts.total} agents ready")
    verdicts = [ready, registry, authenticated(obs)] + ([monitoring] if monitoring is not None else [])
    return PallasDeploymentStatus(
        observed_generation=obs.generation,
        conditions=c.stamp(verdicts, previous.conditions, obs.generation, now),
        agents=counts,
        registry_url=obs.registry_url if obs.registry_enabled else None,
    )
