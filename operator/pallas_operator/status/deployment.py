"""The status policy of a PallasDeployment: its registry, monitoring and agent counts. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pallas_operator.api.status import AgentCounts, PallasDeploymentStatus
from pallas_operator.status import conditions as c
from pallas_operator.status.workload import Workload

ALL_AGENTS_READY: Final = "AllAgentsReady"
AGENTS_NOT_READY: Final = "AgentsNotReady"
REGISTRY_DISABLED: Final = "RegistryDisabled"
REGISTRY_UNAVAILABLE: Final = "RegistryUnavailable"
SERVICE_MONITOR_CRD_NOT_FOUND: Final = "ServiceMonitorCRDNotFound"


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


def _registry(obs: DeploymentObservation) -> c.Verdict:
    if not obs.registry_enabled:
        return c.true(c.REGISTRY_AVAILABLE, REGISTRY_DISABLED, "spec.registry.enabled is false")
    if obs.registry is None:
        return c.false(
            c.REGISTRY_AVAILABLE, "DeploymentNotCreated", "the registry Deployment does not exist yet"
        )
    if obs.registry.available:
        return c.true(c.REGISTRY_AVAILABLE, "MinimumReplicasAvailable", obs.registry.message)
    return c.false(c.REGISTRY_AVAILABLE, REGISTRY_UNAVAILABLE, obs.registry.message)


def _monitoring(obs: DeploymentObservation) -> c.Verdict | None:
    if not obs.monitoring_enabled:
        return None
    if obs.monitoring_crd_present:
        return c.true(c.MONITORING_READY, "ServiceMonitorsApplied")
    return c.false(
        c.MONITORING_READY,
        SERVICE_MONITOR_CRD_NOT_FOUND,
        "monitoring.serviceMonitor.enabled is true but the monitoring.coreos.com ServiceMonitor CRD is not "
        "installed: install the Prometheus Operator CRDs or disable it",
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
    registry = _registry(obs)
    monitoring = _monitoring(obs)
    if not registry.true:
        ready = c.false(c.READY, REGISTRY_UNAVAILABLE, registry.message)
    elif counts.ready < counts.total:
        ready = c.false(c.READY, AGENTS_NOT_READY, f"{counts.ready}/{counts.total} agents ready")
    else:
        ready = c.true(c.READY, ALL_AGENTS_READY, f"{counts.ready}/{counts.total} agents ready")
    verdicts = [ready, registry] + ([monitoring] if monitoring is not None else [])
    return PallasDeploymentStatus(
        observed_generation=obs.generation,
        conditions=c.stamp(verdicts, previous.conditions, obs.generation, now),
        agents=counts,
        registry_url=obs.registry_url if obs.registry_enabled else None,
    )
