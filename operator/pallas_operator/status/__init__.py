"""The status policy (pure): references checks, conditions, phase and counts.

Handlers gather observations; these functions decide what the status says. Nothing here reads a
clock: the caller passes `now`, so the same observations always give the same status.
"""

from pallas_operator.status.agent import AgentObservation, HealthResult, Verification, agent_status
from pallas_operator.status.deployment import (
    AgentSummary,
    DeploymentObservation,
    HostedServer,
    ProviderCheck,
    ProviderReport,
    deployment_status,
)
from pallas_operator.status.references import (
    AgentFacts,
    Problem,
    check_agent,
    waiting_for,
)
from pallas_operator.status.workload import Workload, workload

__all__ = [
    "AgentFacts",
    "AgentObservation",
    "AgentSummary",
    "DeploymentObservation",
    "HealthResult",
    "HostedServer",
    "Problem",
    "ProviderCheck",
    "ProviderReport",
    "Verification",
    "Workload",
    "agent_status",
    "check_agent",
    "deployment_status",
    "waiting_for",
    "workload",
]
