"""Condition types and reasons of both resources: the words `kubectl`, alerts and clients read.

Every reason the operator (or the renderer it shares with `pallas run`) can write is a constant
here, next to the status models, so a reason is spelled once (cert-manager keeps its
`ConditionReason`s beside the types the same way).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# --- condition types ----------------------------------------------------------------------
ACCEPTED: Final = "Accepted"
DEPENDENCIES_READY: Final = "DependenciesReady"
AVAILABLE: Final = "Available"
VERIFIED: Final = "Verified"
HEALTHY: Final = "Healthy"
READY: Final = "Ready"
REGISTRY_AVAILABLE: Final = "RegistryAvailable"
MONITORING_READY: Final = "MonitoringReady"
AUTHENTICATED: Final = "Authenticated"
PROVIDERS_HEALTHY: Final = "ProvidersHealthy"
SERVERS_AVAILABLE: Final = "ServersAvailable"
"""PallasDeployment: the stdio servers the operator hosts (only when the spec has some)."""

# --- Accepted -----------------------------------------------------------------------------
ACCEPTED_REASON: Final = "Accepted"
INVALID_SPEC: Final = "InvalidSpec"
DEPLOYMENT_NOT_FOUND: Final = "DeploymentNotFound"
AGENT_NOT_FOUND: Final = "AgentNotFound"
EVENT_KIND_NOT_ALLOWED: Final = "EventKindNotAllowed"
"""An event trigger on a kind the chart's `triggers.eventKinds` does not list (or in a namespace
the operator does not watch): the operator may not watch it."""
PROVIDER_NOT_FOUND: Final = "ProviderNotFound"
SERVER_NOT_FOUND: Final = "ServerNotFound"
DEPENDENCY_CYCLE: Final = "DependencyCycle"
NAME_CONFLICT: Final = "NameConflict"
STEP_OUTSIDE_DEPLOYMENT: Final = "StepOutsideDeployment"
"""A workflow step names a PallasAgent of another deployment."""
ACCESS_NOT_ENFORCEABLE: Final = "AccessNotEnforceable"
"""spec.access names callers but the deployment authenticates nobody (auth.mode none)."""
STDIO_NOT_HOSTABLE: Final = "StdioServerNotHostable"
"""A stateful stdio server in a cluster: one container cannot run a process per session."""

# --- DependenciesReady --------------------------------------------------------------------
DEPENDENCIES_READY_REASON: Final = "DependenciesReady"
NO_DEPENDENCIES: Final = "NoDependencies"
DEPENDENCIES_NOT_READY: Final = "DependenciesNotReady"
NOT_ACCEPTED: Final = "NotAccepted"

# --- Available (agents) and RegistryAvailable ---------------------------------------------
MINIMUM_REPLICAS_AVAILABLE: Final = "MinimumReplicasAvailable"
DEPLOYMENT_NOT_CREATED: Final = "DeploymentNotCreated"
SCALED_TO_ZERO: Final = "ScaledToZero"
DEPLOYMENT_UNAVAILABLE: Final = "DeploymentUnavailable"
REGISTRY_DISABLED: Final = "RegistryDisabled"
REGISTRY_UNAVAILABLE: Final = "RegistryUnavailable"

# --- Verified -----------------------------------------------------------------------------
VERIFIED_REASON: Final = "Verified"
AWAITING_AVAILABILITY: Final = "AwaitingAvailability"
VERIFYING: Final = "Verifying"
VERIFICATION_FAILED: Final = "VerificationFailed"

VERIFIED_WITHOUT_TOKEN: Final = "VerifiedWithoutToken"
"""oidc mode: the operator holds no token, so it checked the agent's authorization challenge."""

# --- Healthy (HealthOk, HealthDegraded, HealthError come from the report's status) -------------
NOT_CHECKED: Final = "NotChecked"
HEALTH_CHECK_FAILED: Final = "HealthCheckFailed"
HEALTH_OK: Final = "HealthOk"
HEALTH_DEGRADED: Final = "HealthDegraded"
HEALTH_ERROR: Final = "HealthError"
HEALTH_NOT_CHECKABLE: Final = "HealthNotCheckable"
"""oidc mode: get_health needs a token the operator does not hold."""
SECRET_KEY_NOT_FOUND: Final = "SecretKeyNotFound"
"""The agent's pod has no value for a Secret key its config names (no such Secret, or no such
key in it): its `get_health` lists them in `missingSecrets`. The operator reads no Secret, so
the pod, which mounts them, is the one to say; it blocks Ready when the key is the LLM's."""

# --- Ready --------------------------------------------------------------------------------
AGENT_READY: Final = "AgentReady"
ALL_AGENTS_READY: Final = "AllAgentsReady"
AGENTS_NOT_READY: Final = "AgentsNotReady"

# --- Ready (PallasTrigger) -----------------------------------------------------------------
SCHEDULED: Final = "Scheduled"
"""A schedule trigger the operator fires."""
WATCHING: Final = "Watching"
"""An event trigger whose kind the operator watches."""
SUSPENDED: Final = "Suspended"
AGENT_NOT_READY: Final = "AgentNotReady"
"""The trigger's agent has no URL yet (not Ready): firing would only fail."""
SOURCE_NOT_RUN: Final = "SourceNotRunHere"
"""A webhook trigger: this version of the operator does not serve those (docs/triggers.md)."""

# --- MonitoringReady ----------------------------------------------------------------------
SERVICE_MONITORS_APPLIED: Final = "ServiceMonitorsApplied"
SERVICE_MONITOR_CRD_NOT_FOUND: Final = "ServiceMonitorCRDNotFound"

# --- Authenticated (PallasDeployment) ---------------------------------------------------------
KUBERNETES_AUTH: Final = "KubernetesRBAC"
OIDC_AUTH: Final = "OIDC"
UNAUTHENTICATED: Final = "Unauthenticated"
"""auth.mode none while the registry publishes a public URL: anyone reaching it may call agents."""
AUTH_DISABLED: Final = "AuthDisabled"
"""auth.mode none, agents reachable only inside the cluster."""

# --- ServersAvailable (PallasDeployment; advice, never a blocker of Ready) ------------------------
SERVERS_AVAILABLE_REASON: Final = "ServersAvailable"
SERVERS_UNAVAILABLE: Final = "ServersUnavailable"
"""A hosted stdio server's Deployment does not exist yet or has no ready pod (its bridge is Ready
only while the server has a session)."""

# --- ProvidersHealthy (PallasDeployment; advice, never a blocker of Ready) --------------------
PROVIDERS_OK: Final = "ProvidersOk"
PROVIDER_CHECK_FAILED: Final = "ProviderCheckFailed"
PROVIDERS_NOT_CHECKED: Final = "ProvidersNotChecked"
"""No report from the registry yet (it is starting, unreachable, or has not checked them all)."""


HealthStatus = Literal["ok", "degraded", "error"]
"""An agent's health as `get_health` reports it and status publishes it (`pallas_api.health`)."""
HEALTH_STATUSES: tuple[HealthStatus, ...] = get_args(HealthStatus)
"""Here among the leaves, not in `status`: an agent reports its health without importing the
CRDs' status models (~0.1 s of its start, issue 53)."""
