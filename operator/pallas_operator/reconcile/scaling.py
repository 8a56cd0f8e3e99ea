"""The reconcile's part in scaling: hand `replicas` to the scaling loop, and keep the loop running.

Under `scaling` the agent's Deployment is applied without `replicas` (`builders.agent.scaled`),
and the loop's own field manager owns them. Server-side apply removes a field its manager stops
setting unless another manager owns it (then it stays), so the field is handed over first: an
existing Deployment (fixed until now) is sized by the loop's manager at its current replicas,
kept between min and max, before the apply that drops them; a new one, created by the apply
without replicas (the API server's default, 1), is then sized at `max(minReplicas, 1)`.
"""

from __future__ import annotations

from pallas_api.spec.common import ScalingSpec
from pallas_operator.engine.context import AGENT, Operator
from pallas_operator.engine.scaler import ScaleTarget
from pallas_operator.engine.world import ChildRecord, OwnerRecord
from pallas_operator.reconcile.plan import AgentPlan


def start_replicas(scaling: ScalingSpec, current: int | None) -> int:
    """The replicas the loop's manager takes over with: `current` within the scaling's bounds.

    Never below 1: nothing wakes an agent at 0 pods yet (no activator; docs/api.md "Scaling").
    """
    floor = max(scaling.min_replicas, 1)
    return floor if current is None else min(max(current, floor), scaling.max_replicas)


async def hand_over(
    op: Operator, namespace: str, name: str, plan: AgentPlan, deployment: ChildRecord | None
) -> None:
    """Before the apply: give an existing Deployment's replicas to the loop's manager, once."""
    if plan.scaling is None or deployment is None or deployment.loop_sized:
        return
    current = deployment.workload.replicas if deployment.workload is not None else None
    await op.cluster.scale(namespace, name, start_replicas(plan.scaling, current))
    op.metrics.count_write("Deployment", "scale")


async def size_created(op: Operator, namespace: str, name: str, plan: AgentPlan) -> None:
    """After the apply that created the Deployment: its first size, by the loop's manager."""
    if plan.scaling is None:
        return
    await op.cluster.scale(namespace, name, start_replicas(plan.scaling, None))
    op.metrics.count_write("Deployment", "scale")


def track(op: Operator, record: OwnerRecord, plan: AgentPlan, deployed: bool) -> None:
    """Run the agent's scaling loop while its scaling applies and its Deployment exists; else stop it."""
    target = None
    if plan.spec is not None and plan.scaling is not None and deployed:
        target = ScaleTarget(record.namespace, record.name, record.uid, plan.spec.service.port, plan.scaling)
    op.scaler.track((AGENT, record.namespace, record.name), target)
