"""Reconcile one PallasAgent: plan, apply the children, compute and write the status, probe."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from pallas_operator.api import names
from pallas_operator.api.status import PallasAgentStatus
from pallas_operator.handlers.agent_plan import AgentPlan, plan_agent
from pallas_operator.handlers.context import AGENT, Operator, now
from pallas_operator.handlers.health import ProbeTarget
from pallas_operator.handlers.world import ChildRecord, OwnerRecord
from pallas_operator.k8s.events import post_event
from pallas_operator.status import AgentObservation, Workload, agent_status, workload


def previous_status(record: OwnerRecord) -> PallasAgentStatus:
    """The status as stored; a status this operator cannot read counts as none."""
    try:
        return PallasAgentStatus.model_validate(record.status)
    except ValidationError:
        return PallasAgentStatus()


async def _apply(
    op: Operator, plan: AgentPlan, record: OwnerRecord, children: dict[tuple[str, str], ChildRecord]
) -> Workload | None:
    """Apply the wanted children, delete the unwanted; the Deployment's latest state."""
    current: Workload | None = None
    seen = children.get(("Deployment", record.name))
    if seen is not None:
        current = seen.workload
    for manifest in plan.desired:
        observed = children.get((manifest["kind"], manifest["metadata"]["name"]))
        applied = await op.applier.apply(manifest, observed.seen if observed else None)
        if applied is not None and manifest["kind"] == "Deployment":
            current = workload(applied)
    for kind, name in plan.unwanted:
        await op.applier.delete(record.namespace, kind, name)
    return current


async def _report(op: Operator, record: OwnerRecord, old: PallasAgentStatus, new: PallasAgentStatus) -> None:
    """A Warning Event when the agent stops being accepted or the reason changes."""
    before = next((c for c in old.conditions if c.type == "Accepted"), None)
    after = next(c for c in new.conditions if c.type == "Accepted")
    if after.status == "False" and (
        before is None or (before.status, before.reason) != ("False", after.reason)
    ):
        await post_event(
            op.client, kind=names.AGENT_KIND, namespace=record.namespace, name=record.name,
            uid=record.uid, reason=after.reason, message=after.message,
        )  # fmt: skip
        op.metrics.count_write(names.AGENT_KIND, "event")


def _probe_target(
    op: Operator, plan: AgentPlan, record: OwnerRecord, current: Workload | None
) -> ProbeTarget | None:
    if plan.spec is None or current is None or not current.available or plan.config_hash is None:
        return None
    # A rollout in progress is verified once it completes; until then the old result stands.
    rollout = plan.config_hash if current.rolled_out else "rolling"
    return ProbeTarget(
        url=names.agent_url(record.name, record.namespace, plan.spec.service.port),
        interval=plan.health_interval,
        health_budget=plan.health_timeout + 5,
        verify_budget=op.settings.verify_timeout,
        rollout=rollout,
    )


async def reconcile_agent(op: Operator, namespace: str, name: str) -> float | None:
    """Bring one agent's children and status in line with its spec and the world."""
    key = (AGENT, namespace, name)
    record = op.world.agent(namespace, name)
    if record is None:  # deleted: the garbage collector removes the children
        op.prober.track(key, None)
        op.applier.forget_owner(namespace, names.AGENT_KIND, name)
        op.uses_secrets(namespace, name, set())
        op.metrics.set_phase(names.AGENT_KIND, namespace, name, None)
        return None
    children = op.world.children(namespace, record.uid)
    plan = plan_agent(op.world, record, children, op.settings.runtime_image)
    op.uses_secrets(namespace, name, plan.secrets)
    current = await _apply(op, plan, record, children) if plan.problem is None else None
    if plan.problem is not None and ("Deployment", name) in children:
        current = children[("Deployment", name)].workload
    op.prober.track(key, _probe_target(op, plan, record, current))
    verification, health = op.prober.results(key)
    spec = plan.spec
    observation = AgentObservation(
        generation=record.generation,
        problem=plan.problem,
        waiting_for=tuple(plan.waiting),
        workload=current,
        verification=verification,
        health=health,
        url=names.agent_url(name, namespace, spec.service.port) if spec else None,
        model=plan.model,
        replicas=spec.replicas if spec else 0,
        dependencies=tuple(spec.dependencies()) if spec else (),
    )
    old = previous_status(record)
    new = agent_status(observation, old, now())
    wire: dict[str, Any] = new.to_wire()
    await op.applier.write_status(
        names.AGENT_KIND, namespace, name, wire, record.status, record.resource_version
    )
    await _report(op, record, old, new)
    op.metrics.set_phase(names.AGENT_KIND, namespace, name, new.phase)
    return None
