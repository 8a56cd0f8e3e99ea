"""The Warning Event of a deployment whose agents became reachable without authentication."""

from __future__ import annotations

from pallas_api import conditions, names
from pallas_api.status import PallasDeploymentStatus
from pallas_operator.engine.context import Operator
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.k8s.cluster import OwnerEvent


async def warn_unauthenticated(
    op: Operator, record: OwnerRecord, old: PallasDeploymentStatus, new: PallasDeploymentStatus
) -> None:
    """A Warning Event when the agents become reachable without authentication at a public URL."""
    before = next((c for c in old.conditions if c.type == conditions.AUTHENTICATED), None)
    after = next((c for c in new.conditions if c.type == conditions.AUTHENTICATED), None)
    key = (record.namespace, record.name)
    if after is None or after.reason != conditions.UNAUTHENTICATED:
        op.unauthenticated_warned.pop(key, None)
        return
    if (before is not None and before.reason == after.reason) or op.unauthenticated_warned.get(
        key
    ) == record.uid:
        return
    op.unauthenticated_warned[key] = record.uid
    await op.cluster.post_event(
        OwnerEvent(
            names.DEPLOYMENT_KIND, record.namespace, record.name, record.uid, after.reason, after.message
        )
    )
    op.metrics.count_write(names.DEPLOYMENT_KIND, "event")


def forget_warning(op: Operator, namespace: str, name: str) -> None:
    """A deleted deployment's warning is forgotten: one created again under its name warns again."""
    op.unauthenticated_warned.pop((namespace, name), None)
