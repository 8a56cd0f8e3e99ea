"""The status policy of a PallasAgent: observations in, status out. Pure.

A chain of small checks gives one verdict per condition; `Ready` and `phase` summarize them.
Without fresh probe results, the last verdicts of Verified and Healthy stand while the agent
stays available: an operator restart or a leader change must not flap every agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pallas_api import conditions as r
from pallas_api.health import HealthStatus
from pallas_api.spending import SpendReport
from pallas_api.status import MAX_SCALING_REASON as MAX_REASON
from pallas_api.status import Health, PallasAgentStatus, Phase, ScalingStatus, ServerInfo
from pallas_api.workflow import WorkflowType
from pallas_operator.status import conditions as c
from pallas_operator.status.references import Problem
from pallas_operator.status.scaling import Decision
from pallas_operator.status.workload import Workload

HEALTH_REASONS: Final[dict[HealthStatus, str]] = {
    "ok": r.HEALTH_OK,
    "degraded": r.HEALTH_DEGRADED,
    "error": r.HEALTH_ERROR,
}
NOT_SERVING: Final = frozenset({r.HEALTH_ERROR, r.HEALTH_CHECK_FAILED, r.SECRET_KEY_NOT_FOUND})


@dataclass(frozen=True, slots=True)
class Verification:
    """The outcome of MCP initialize + tools/list against the agent."""

    ok: bool
    message: str = ""
    server_info: ServerInfo | None = None
    tools: tuple[str, ...] = ()
    without_token: bool = False
    """Only the authorization challenge was checked (oidc: the operator holds no token)."""


@dataclass(frozen=True, slots=True)
class HealthResult:
    """The outcome of one get_health call; `status` None when the call itself failed."""

    status: HealthStatus | None
    message: str = ""
    checkable: bool = True
    """False when the operator cannot call get_health at all (oidc: it holds no token)."""
    busy: bool | None = None
    """What the report said about load (None: the agent has no `busyAt`)."""
    config_hash: str | None = None
    """The config the answering pod serves (None: an older agent, or the call failed)."""
    missing_secrets: tuple[str, ...] = ()
    """The Secret keys its config names that the pod has no value for, in the user's words."""
    spend: SpendReport | None = None
    """What the agent spent in its agent budget's window (None: no such budget)."""


@dataclass(frozen=True, slots=True)
class AgentObservation:
    """Everything the status of one agent is computed from."""

    generation: int
    problem: Problem | None = None
    warning: Problem | None = None
    """Accepted, but runs without something its spec names (its reason and message on `Accepted`)."""
    waiting_for: tuple[str, ...] = ()
    workload: Workload | None = None
    verification: Verification | None = None
    health: HealthResult | None = None
    url: str | None = None
    model: str | None = None
    workflow: WorkflowType | None = None
    replicas: int = 1
    dependencies: tuple[str, ...] = ()
    config_hash: str | None = None
    """The config the operator wrote into the agent's ConfigMap (None: none written)."""
    scaled: bool = False
    """The agent's `scaling` (or its deployment's) applies: the scaling loop sizes it."""
    scaling: Decision | None = None
    """The scaling loop's latest decision (None: none since the operator started)."""


def _previous(previous: PallasAgentStatus, type_: str) -> c.Verdict | None:
    for cond in previous.conditions:
        if cond.type == type_:
            return c.Verdict(cond.type, cond.status, cond.reason, cond.message)
    return None


def _unchecked(type_: str, available: bool, previous: PallasAgentStatus, first: str) -> c.Verdict:
    # A check waits for availability; until its first result the previous condition stands.
    if not available:
        return c.unknown(type_, r.AWAITING_AVAILABILITY)
    return _previous(previous, type_) or c.unknown(type_, first)


def _available(obs: AgentObservation) -> c.Verdict:
    w = obs.workload
    if w is None:
        return c.false(c.AVAILABLE, r.DEPLOYMENT_NOT_CREATED, "the agent's Deployment does not exist yet")
    if w.replicas == 0:
        return c.false(c.AVAILABLE, r.SCALED_TO_ZERO, "spec.replicas is 0")
    if w.available:
        return c.true(c.AVAILABLE, r.MINIMUM_REPLICAS_AVAILABLE, w.message)
    return c.false(c.AVAILABLE, r.DEPLOYMENT_UNAVAILABLE, w.message)


def _verified(obs: AgentObservation, available: bool, previous: PallasAgentStatus) -> c.Verdict:
    v = obs.verification
    if v is None or not available:
        return _unchecked(c.VERIFIED, available, previous, r.VERIFYING)
    if v.ok and v.without_token:
        return c.true(c.VERIFIED, r.VERIFIED_WITHOUT_TOKEN, v.message)
    if v.ok:
        return c.true(
            c.VERIFIED, r.VERIFIED_REASON, f"MCP initialize and tools/list answered ({len(v.tools)} tools)"
        )
    return c.false(c.VERIFIED, r.VERIFICATION_FAILED, v.message)


def _healthy(obs: AgentObservation, available: bool, previous: PallasAgentStatus) -> c.Verdict:
    h = obs.health
    if h is None or not available:
        return _unchecked(c.HEALTHY, available, previous, r.NOT_CHECKED)
    if not h.checkable:
        return c.unknown(c.HEALTHY, r.HEALTH_NOT_CHECKABLE, h.message)
    if h.status is None:
        return c.false(c.HEALTHY, r.HEALTH_CHECK_FAILED, h.message)
    reason = HEALTH_REASONS[h.status]
    if h.status == "ok":
        return c.true(c.HEALTHY, reason)
    if h.missing_secrets and h.status == "error":
        # The agent cannot serve without its LLM key: Ready=False names the Secret key, as
        # Accepted did when the operator still read Secrets (the message names each one).
        reason = r.SECRET_KEY_NOT_FOUND
    return c.false(c.HEALTHY, reason, h.message)


def _ready(chain: list[c.Verdict]) -> c.Verdict:
    for v in chain:
        blocking = v.type == c.HEALTHY and v.reason in NOT_SERVING
        if blocking or (v.type != c.HEALTHY and not v.true):
            return c.false(c.READY, v.reason, v.message)
    return c.true(c.READY, r.AGENT_READY)


def _phase(verdicts: dict[str, c.Verdict], has_workload: bool) -> Phase:
    if not verdicts[c.ACCEPTED].true:
        return "Failed"
    if not verdicts[c.DEPENDENCIES_READY].true:
        return "Waiting"
    healthy = verdicts[c.HEALTHY]
    if verdicts[c.READY].true:
        return "Degraded" if healthy.status == "False" else "Ready"
    if verdicts[c.AVAILABLE].true and (verdicts[c.VERIFIED].status == "False" or healthy.status == "False"):
        return "Degraded"
    return "Progressing" if has_workload else "Pending"


def _health(obs: AgentObservation, previous: PallasAgentStatus, now: str) -> Health | None:
    h = obs.health
    if h is None:
        return previous.health
    if not h.checkable:
        return None
    status: HealthStatus = h.status or "error"
    message = h.message if h.status is not None else f"get_health failed: {h.message}"
    old = previous.health
    seen = (status, message, h.busy, h.spend)
    if old is not None and (old.status, old.message, old.busy, old.spend) == seen:
        return old
    return Health(status=status, message=message, checked_at=now, busy=h.busy, spend=h.spend)


def agent_status(obs: AgentObservation, previous: PallasAgentStatus, now: str) -> PallasAgentStatus:
    """The status to write for an agent, given what was observed and the status written before."""
    if obs.problem is not None:
        accepted = c.false(c.ACCEPTED, obs.problem.reason, obs.problem.message)
        deps = c.unknown(c.DEPENDENCIES_READY, r.NOT_ACCEPTED)
    else:
        warning = obs.warning  # accepted all the same: it runs on the rest
        accepted = (
            c.true(c.ACCEPTED, warning.reason, warning.message)
            if warning is not None
            else c.true(c.ACCEPTED, r.ACCEPTED_REASON)
        )
        deps = (
            c.false(
                c.DEPENDENCIES_READY, r.DEPENDENCIES_NOT_READY, "waiting for: " + ", ".join(obs.waiting_for)
            )
            if obs.waiting_for
            else c.true(
                c.DEPENDENCIES_READY, r.DEPENDENCIES_READY_REASON if obs.dependencies else r.NO_DEPENDENCIES
            )
        )
    available = _available(obs)
    verified = _verified(obs, available.true, previous)
    healthy = _healthy(obs, available.true, previous)
    ready = _ready([accepted, deps, available, verified, healthy])
    verdicts = {v.type: v for v in (accepted, deps, available, verified, healthy, ready)}
    v = obs.verification
    return PallasAgentStatus(
        phase=_phase(verdicts, obs.workload is not None),
        conditions=c.stamp(verdicts.values(), previous.conditions, obs.generation, now),
        url=obs.url,
        model=obs.model,
        workflow=obs.workflow,
        replicas=obs.replicas,
        ready_replicas=obs.workload.ready_replicas if obs.workload else 0,
        health=_health(obs, previous, now),
        server_info=v.server_info if v is not None and v.ok else previous.server_info,
        tools=list(v.tools) if v is not None and v.ok else previous.tools,
        config_hash=obs.config_hash or previous.config_hash,
        served_config_hash=_served(obs, previous),
        observed_generation=obs.generation,
        scaling=_scaling(obs, previous),
    )


def _scaling(obs: AgentObservation, previous: PallasAgentStatus) -> ScalingStatus | None:
    """The loop's decision while it sizes the agent; the previous one stands until its first round."""
    if not obs.scaled:
        return None
    if obs.scaling is None:
        return previous.scaling
    return ScalingStatus(desired_replicas=obs.scaling.replicas, reason=obs.scaling.reason[:MAX_REASON])


def _served(obs: AgentObservation, previous: PallasAgentStatus) -> str | None:
    """The config the agent last said it serves; the previous answer stands without a new one."""
    h = obs.health
    if h is not None and h.config_hash is not None:
        return h.config_hash
    return previous.served_config_hash
