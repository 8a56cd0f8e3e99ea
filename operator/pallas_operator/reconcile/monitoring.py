"""A deployment's ServiceMonitors, applied or pruned only where the Prometheus Operator's CRD exists."""

from __future__ import annotations

from pallas_api.spec import PallasDeploymentSpec
from pallas_operator.builders import Owner, service_monitors
from pallas_operator.engine.context import Operator
from pallas_operator.engine.world import OwnerRecord


async def sync_service_monitors(
    op: Operator, record: OwnerRecord, owner: Owner, spec: PallasDeploymentSpec
) -> bool:
    """Apply or prune ServiceMonitors; whether their CRD exists (listed once per generation)."""
    namespace, name = record.namespace, record.name
    wanted = service_monitors(owner, spec)
    present = op.monitoring_checks.known(namespace, name, record.generation)
    if present is not None:
        for manifest in wanted if present else []:
            await op.applier.apply(manifest, None)
        return present
    existing = await op.cluster.owned_service_monitors(namespace, name)
    if existing is not None:
        for manifest in wanted:
            await op.applier.apply(manifest, existing.get(manifest["metadata"]["name"]))
        for child in set(existing) - {m["metadata"]["name"] for m in wanted}:
            await op.applier.delete(namespace, "ServiceMonitor", child)
    op.monitoring_checks.record(namespace, name, record.generation, present=existing is not None)
    return existing is not None
