"""Reconcile one PallasDeployment.

Its registry, its agents' identity (auth.mode kubernetes) and NetworkPolicy, its ServiceMonitors,
its status.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from pallas_api import conditions, names
from pallas_api.render import with_default_telemetry
from pallas_api.spec import PallasDeploymentSpec
from pallas_api.status import PallasDeploymentStatus
from pallas_api.validation import describe
from pallas_operator.builders import (
    Manifest,
    Owner,
    access_children,
    agents_network_policy,
    auth_delegation_binding,
    hosted_servers,
    registry_children,
    service_monitors,
    stdio_children,
)
from pallas_operator.engine.context import DEPLOYMENT, Operator, now
from pallas_operator.engine.provider_reports import ReportSource
from pallas_operator.engine.world import OwnerRecord
from pallas_operator.k8s.cluster import OwnerEvent
from pallas_operator.reconcile.children import apply_children, stored_status
from pallas_operator.status import (
    AgentSummary,
    DeploymentObservation,
    HostedServer,
    ProviderReport,
    Workload,
    deployment_status,
)

log = logging.getLogger(__name__)


def _summaries(op: Operator, record: OwnerRecord) -> tuple[AgentSummary, ...]:
    agents = op.world.agents_of(record.namespace, record.name)
    return tuple(
        AgentSummary(
            ready=a.condition(conditions.READY) == "True",
            healthy=(a.status.get("health") or {}).get("status") == "ok",
        )
        for a in agents
    )


async def _monitoring(op: Operator, record: OwnerRecord, owner: Owner, spec: PallasDeploymentSpec) -> bool:
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
    await _delegation(op, owner, wanted=spec.auth.mode == "kubernetes")
    wanted = {(m["kind"], m["metadata"]["name"]) for m in desired}
    unwanted = [key for key in children if key not in wanted]
    applied = await apply_children(op, namespace, desired, children, unwanted, names.registry_name(name))
    registry = applied.workload
    report = _provider_report(op, record, spec, registry)
    crd_present = await _monitoring(op, record, owner, spec)
    monitoring_enabled = spec.monitoring.service_monitor.enabled
    observation = DeploymentObservation(
        generation=record.generation,
        agents=_summaries(op, record),
        registry_enabled=spec.registry.enabled,
        registry=registry,
        registry_url=names.registry_url(name, namespace, spec.registry.port),
        monitoring_enabled=monitoring_enabled,
        monitoring_crd_present=crd_present,
        auth_mode=spec.auth.mode,
        public_url_template=spec.registry.public_url_template,
        providers=tuple(spec.providers),
        provider_report=report,
        servers=_servers(op, record, spec),
    )
    status = deployment_status(observation, previous, now())
    await _write(op, record, status)
    await _report(op, record, previous, status)
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


def _provider_report(
    op: Operator, record: OwnerRecord, spec: PallasDeploymentSpec, registry: Workload | None
) -> ProviderReport | None:
    """Read the registry's provider checks while it is available; the last report read."""
    key = (DEPLOYMENT, record.namespace, record.name)
    source = None
    if spec.registry.enabled and registry is not None and registry.available:
        base = names.registry_base_url(record.name, record.namespace, spec.registry.port)
        source = ReportSource(
            url=base + "healthz",
            deployment=record.name,
            interval=spec.health_check.interval_seconds,
            time_limit=spec.health_check.timeout_seconds + 5,
            expected=len(spec.providers),
        )
    op.provider_reports.track(key, source)
    return op.provider_reports.report(key)


def _desired(op: Operator, owner: Owner, spec: PallasDeploymentSpec) -> list[Manifest]:
    """The namespaced children: registry, hosted stdio servers, agents identity, NetworkPolicy."""
    settings = op.settings
    desired = (
        registry_children(owner, spec, settings.runtime_image, settings.node_failure_toleration_seconds)
        if spec.registry.enabled
        else []
    )
    desired += stdio_children(owner, spec, settings.runtime_image)
    if spec.auth.mode == "kubernetes":
        agents = [a.name for a in op.world.agents_of(owner.namespace, owner.name)]
        desired += access_children(owner, agents)
    if spec.network.policy:
        desired.append(agents_network_policy(owner, spec, settings.pod_namespace, settings.pod_labels))
    return desired


async def _delegation(op: Operator, owner: Owner, *, wanted: bool) -> None:
    """Apply or delete the deployment's cluster-scoped auth-delegator binding.

    It is not watched (cluster-scoped, and only a few exist): `op.delegations` remembers whether
    it exists, and what is not known yet is read once. Nothing is written when the binding
    already is what it should be, or already absent.
    """
    namespace, deployment = owner.namespace, owner.name
    known = op.delegations.known(namespace, deployment)
    if wanted:
        name = names.auth_delegation_binding(namespace, deployment)
        observed = await op.applier.observe("ClusterRoleBinding", name) if known is None else None
        await op.applier.apply(auth_delegation_binding(owner), observed)
        op.delegations.record(namespace, deployment, exists=True)
        return
    await _delete_binding(op, namespace, deployment, exists=known)
    op.delegations.record(namespace, deployment, exists=False)


async def _delete_binding(op: Operator, namespace: str, deployment: str, *, exists: bool | None) -> None:
    """Delete the deployment's auth-delegator binding if it `exists` (read once when not known).

    The probe tokens of the agents' ServiceAccount are dropped with it: the deployment has left
    `auth.mode: kubernetes`, or is gone. Used by both a reconcile and a deletion.
    """
    name = names.auth_delegation_binding(namespace, deployment)
    if exists is None:
        exists = await op.applier.observe("ClusterRoleBinding", name) is not None
    if exists:
        await op.applier.delete("", "ClusterRoleBinding", name)
        op.tokens.forget(namespace, names.agents_service_account(deployment))


async def _report(
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


async def _forget(op: Operator, namespace: str, name: str) -> None:
    op.provider_reports.track((DEPLOYMENT, namespace, name), None)
    await _unbind(op, namespace, name)
    op.applier.forget_owner(namespace, names.DEPLOYMENT_KIND, name)
    op.monitoring_checks.forget(namespace, name)
    op.unauthenticated_warned.pop((namespace, name), None)
    op.metrics.set_phase(names.DEPLOYMENT_KIND, namespace, name, None)


async def _unbind(op: Operator, namespace: str, name: str) -> None:
    """Delete a deleted deployment's auth-delegator binding, if it has one.

    Cluster-scoped, so no owner reference removes it with the deployment. When this process does
    not know it (the deployment went before its first reconcile here), it is read (a GET). One
    of a deployment deleted while no operator ran is the orphan sweep's (`reconcile.orphans`).
    """
    await _delete_binding(op, namespace, name, exists=op.delegations.forget(namespace, name))


def _invalid(op: Operator, record: OwnerRecord, exc: ValidationError) -> DeploymentObservation:
    return DeploymentObservation(
        generation=record.generation,
        agents=_summaries(op, record),
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
