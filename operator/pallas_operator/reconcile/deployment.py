"""Reconcile one PallasDeployment: its children, then its status.

The reconcile reads the spec and the world and writes what changed, one concern a module: the
hosted stdio servers' credential (`bridge_token`), the namespaced children (registry, hosted
stdio servers, the agents' identity and NetworkPolicies)
through `children.apply_children`, the cluster-scoped auth-delegator binding (`delegation`), the
ServiceMonitors (`monitoring`), the registry's provider checks (`provider_checks`), the status,
and the Warning of agents reachable without authentication (`unauthenticated`).
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from pallas_api import conditions, names
from pallas_api.render import split_model, with_default_telemetry
from pallas_api.spec import PallasDeploymentSpec
from pallas_api.status import PallasDeploymentStatus
from pallas_api.validation import describe
from pallas_operator.builders import (
    Manifest,
    Owner,
    access_children,
    agents_network_policy,
    agents_service_account,
    bridges_network_policy,
    hosted_servers,
    registry_children,
    stdio_children,
)
from pallas_operator.engine.context import DEPLOYMENT, Operator, now
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.reconcile.bridge_token import ensure_bridge_token
from pallas_operator.reconcile.children import apply_children, stored_status
from pallas_operator.reconcile.delegation import sync_delegation, unbind
from pallas_operator.reconcile.monitoring import sync_service_monitors
from pallas_operator.reconcile.provider_checks import provider_report
from pallas_operator.reconcile.unauthenticated import forget_warning, warn_unauthenticated
from pallas_operator.status import AgentSummary, DeploymentObservation, HostedServer, deployment_status

log = logging.getLogger(__name__)


def _summaries(op: Operator, record: OwnerRecord, default_model: str) -> tuple[AgentSummary, ...]:
    agents = op.world.agents_of(record.namespace, record.name)
    return tuple(
        AgentSummary(
            ready=a.condition(conditions.READY) == "True",
            healthy=(a.status.get("health") or {}).get("status") == "ok",
            providers=(split_model(str(a.spec.get("model") or default_model))[0],),
            servers=tuple(str(s) for s in a.spec.get("servers") or ()),
        )
        for a in agents
    )


async def reconcile_deployment(op: Operator, namespace: str, name: str) -> float | None:
    """Bring one deployment's registry, monitoring and status in line with its spec."""
    record = op.world.deployment(namespace, name)
    if record is None:  # deleted: the garbage collector removes the registry
        await _forget(op, namespace, name)
        return None
    previous = stored_status(PallasDeploymentStatus, record)
    try:
        spec = with_default_telemetry(
            PallasDeploymentSpec.model_validate(record.spec), op.settings.default_telemetry
        )
    except ValidationError as exc:  # only with a CRD older than the operator
        await _write(op, record, deployment_status(_invalid(op, record, exc), previous, now()))
        return None
    owner = Owner(names.DEPLOYMENT_KIND, name, namespace, record.uid)
    children = op.world.children(namespace, record.uid)
    desired = _desired(op, owner, spec)
    if hosted_servers(spec):  # before their bridges, which start only with it
        await ensure_bridge_token(op, owner)
    await sync_delegation(op, owner, wanted=spec.auth.mode == "kubernetes")
    wanted = {(m["kind"], m["metadata"]["name"]) for m in desired}
    unwanted = [key for key in children if key not in wanted]
    applied = await apply_children(op, namespace, desired, children, unwanted, names.registry_name(name))
    registry = applied.workload
    report = provider_report(op, record, spec, registry)
    crd_present = await sync_service_monitors(op, record, owner, spec)
    monitoring_enabled = spec.monitoring.service_monitor.enabled
    observation = DeploymentObservation(
        generation=record.generation,
        agents=_summaries(op, record, spec.model.default),
        registry_enabled=spec.registry.enabled,
        registry=registry,
        registry_url=names.registry_url(name, namespace, spec.registry.port),
        monitoring_enabled=monitoring_enabled,
        monitoring_crd_present=crd_present,
        auth_mode=spec.auth.mode,
        public_url_template=spec.registry.public_url_template,
        providers=tuple(spec.providers),
        server_names=tuple(spec.mcp_servers),
        provider_report=report,
        servers=_servers(op, record, spec),
    )
    status = deployment_status(observation, previous, now())
    await _write(op, record, status)
    await warn_unauthenticated(op, record, previous, status)
    return op.settings.monitoring_recheck if monitoring_enabled and not crd_present else None


def _servers(op: Operator, record: OwnerRecord, spec: PallasDeploymentSpec) -> tuple[HostedServer, ...]:
    """The stdio servers and their Deployments as the watch last saw them."""
    children = op.world.children(record.namespace, record.uid)
    hosted = hosted_servers(spec)
    out = []
    for server, server_spec in sorted(spec.mcp_servers.items()):
        if server_spec.stdio is None:
            continue
        seen = children.get(("Deployment", names.stdio_server_name(record.name, server)))
        out.append(HostedServer(server, seen.workload if seen is not None else None, server in hosted))
    return tuple(out)


def _desired(op: Operator, owner: Owner, spec: PallasDeploymentSpec) -> list[Manifest]:
    """The namespaced children: registry, hosted stdio servers, agents identity, NetworkPolicy."""
    settings = op.settings
    desired = (
        registry_children(owner, spec, settings.runtime_image, settings.node_failure_toleration_seconds)
        if spec.registry.enabled
        else []
    )
    desired += stdio_children(owner, spec, settings.runtime_image)
    cloud_identity = spec.runtime.service_account.annotations
    if spec.auth.mode == "kubernetes":
        agents = [a.name for a in op.world.agents_of(owner.namespace, owner.name)]
        desired += access_children(owner, agents, cloud_identity)
    elif cloud_identity:
        desired.append(agents_service_account(owner, cloud_identity))
    if spec.network.policy:
        desired.append(agents_network_policy(owner, spec, settings.pod_namespace, settings.pod_labels))
        if hosted_servers(spec):
            desired.append(bridges_network_policy(owner))
    return desired


async def _forget(op: Operator, namespace: str, name: str) -> None:
    op.provider_reports.track((DEPLOYMENT, namespace, name), None)
    await unbind(op, namespace, name)
    op.applier.forget_owner(namespace, names.DEPLOYMENT_KIND, name)
    op.monitoring_checks.forget(namespace, name)
    forget_warning(op, namespace, name)
    op.metrics.set_phase(names.DEPLOYMENT_KIND, namespace, name, None)


def _invalid(op: Operator, record: OwnerRecord, exc: ValidationError) -> DeploymentObservation:
    return DeploymentObservation(
        generation=record.generation,
        agents=_summaries(op, record, default_model=""),
        registry_enabled=False,
        registry=None,
        registry_url=None,
        monitoring_enabled=False,
        monitoring_crd_present=False,
        problem=f"invalid spec: {describe(exc, prefix='spec', limit=1)} "
        "(the CRD in the cluster is older than the operator: upgrade the CRDs)",
    )


async def _write(op: Operator, record: OwnerRecord, status: PallasDeploymentStatus) -> None:
    namespace, name = record.namespace, record.name
    written = await op.applier.write_status(
        names.DEPLOYMENT_KIND, namespace, name, status.to_wire(), record.status, record.resource_version
    )
    ready = next(c for c in status.conditions if c.type == conditions.READY)
    if written and ready.reason == conditions.INVALID_SPEC:
        log.warning("PallasDeployment %s/%s: %s", namespace, name, ready.message)
    op.metrics.set_phase(
        names.DEPLOYMENT_KIND, namespace, name, "Ready" if ready.status == "True" else "NotReady"
    )
