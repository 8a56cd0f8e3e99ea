"""Reconcile one PallasDeployment: its registry, its ServiceMonitors, its status."""

from __future__ import annotations

import time

from pydantic import ValidationError

from pallas_operator.api import names
from pallas_operator.api.status import PallasDeploymentStatus
from pallas_operator.builders import Manifest, Owner, registry_children, service_monitors
from pallas_operator.handlers.context import MonitoringCheck, Operator, now
from pallas_operator.handlers.world import OwnerRecord
from pallas_operator.k8s.monitoring import owned_service_monitors
from pallas_operator.status import AgentSummary, DeploymentObservation, Workload, deployment_status, workload
from pallas_runtime.config.resources import PallasDeploymentSpec


def _summaries(op: Operator, record: OwnerRecord) -> tuple[AgentSummary, ...]:
    agents = op.world.agents_of(record.namespace, record.name)
    return tuple(
        AgentSummary(
            ready=a.condition("Ready") == "True",
            healthy=(a.status.get("health") or {}).get("status") == "ok",
        )
        for a in agents
    )


async def _monitoring(op: Operator, record: OwnerRecord, owner: Owner, spec: PallasDeploymentSpec) -> bool:
    """Apply or prune ServiceMonitors; whether their CRD exists.

    The list request that answers it is made once per generation (and every
    `monitoring_recheck` seconds while the CRD is missing), not on every agent status change
    that reconciles the deployment.
    """
    key = (record.namespace, record.name)
    last = op.monitoring_checked.get(key)
    wanted = service_monitors(owner, spec)
    fresh = last is not None and last.generation == record.generation
    if (
        fresh
        and last is not None
        and (last.present or time.monotonic() - last.at < op.settings.monitoring_recheck)
    ):
        for manifest in wanted if last.present else []:
            await op.applier.apply(manifest, None)
        return last.present
    existing = await owned_service_monitors(op.client, record.namespace, record.name)
    if existing is not None:
        for manifest in wanted:
            await op.applier.apply(manifest, existing.get(manifest["metadata"]["name"]))
        for name in set(existing) - {m["metadata"]["name"] for m in wanted}:
            await op.applier.delete(record.namespace, "ServiceMonitor", name)
    op.monitoring_checked[key] = MonitoringCheck(record.generation, time.monotonic(), existing is not None)
    return existing is not None


async def reconcile_deployment(op: Operator, namespace: str, name: str) -> float | None:
    """Bring one deployment's registry, monitoring and status in line with its spec."""
    record = op.world.deployment(namespace, name)
    if record is None:  # deleted: the garbage collector removes the registry
        op.applier.forget_owner(namespace, names.DEPLOYMENT_KIND, name)
        op.monitoring_checked.pop((namespace, name), None)
        op.metrics.set_phase(names.DEPLOYMENT_KIND, namespace, name, None)
        return None
    try:
        spec = PallasDeploymentSpec.model_validate(record.spec)
    except ValidationError:  # only with a CRD older than the operator; agents report it
        return None
    owner = Owner(names.DEPLOYMENT_KIND, name, namespace, record.uid)
    children = op.world.children(namespace, record.uid)
    desired: list[Manifest] = (
        registry_children(owner, spec, op.settings.runtime_image) if spec.registry.enabled else []
    )
    registry: Workload | None = None
    seen = children.get(("Deployment", names.registry_name(name)))
    if seen is not None:
        registry = seen.workload
    for manifest in desired:
        observed = children.get((manifest["kind"], manifest["metadata"]["name"]))
        applied = await op.applier.apply(manifest, observed.seen if observed else None)
        if applied is not None and manifest["kind"] == "Deployment":
            registry = workload(applied)
    wanted = {(m["kind"], m["metadata"]["name"]) for m in desired}
    for kind, child in children:
        if (kind, child) not in wanted:
            await op.applier.delete(namespace, kind, child)
    crd_present = await _monitoring(op, record, owner, spec)
    monitoring_enabled = spec.monitoring.service_monitor.enabled
    previous = _previous(record)
    observation = DeploymentObservation(
        generation=record.generation,
        agents=_summaries(op, record),
        registry_enabled=spec.registry.enabled,
        registry=registry,
        registry_url=names.registry_url(name, namespace, spec.registry.port),
        monitoring_enabled=monitoring_enabled,
        monitoring_crd_present=crd_present,
    )
    status = deployment_status(observation, previous, now())
    await op.applier.write_status(
        names.DEPLOYMENT_KIND, namespace, name, status.to_wire(), record.status, record.resource_version
    )
    ready = next(c for c in status.conditions if c.type == "Ready")
    op.metrics.set_phase(
        names.DEPLOYMENT_KIND, namespace, name, "Ready" if ready.status == "True" else "NotReady"
    )
    return op.settings.monitoring_recheck if monitoring_enabled and not crd_present else None


def _previous(record: OwnerRecord) -> PallasDeploymentStatus:
    try:
        return PallasDeploymentStatus.model_validate(record.status)
    except ValidationError:
        return PallasDeploymentStatus()
