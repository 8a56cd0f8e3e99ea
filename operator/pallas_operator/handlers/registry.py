"""The kopf registrations: what is watched, indexed, and which events queue which reconciles.

kopf handlers here only record and route: indexes keep what reconciles read, and every trigger
ends in `Operator.enqueue`. The queue runs the one idempotent reconcile per resource. (Handlers
take `**kw`: kopf passes everything by keyword, and its typed protocols want exactly that.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kopf

from pallas_operator.api import names
from pallas_operator.handlers.agent import reconcile_agent
from pallas_operator.handlers.context import AGENT, DEPLOYMENT, Operator
from pallas_operator.handlers.deployment import reconcile_deployment
from pallas_operator.handlers.world import (
    CHILD_RESOURCES,
    child_record,
    controller_of,
    dependencies,
    owner_record,
    secret_digests,
)

MANAGED = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
KOPF_WORKERS = 32
G, V = names.GROUP, names.VERSION
AGENTS, DEPLOYMENTS = names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL
INDEXES = (
    "agents",
    "agents_by_namespace",
    "agents_by_dependency",
    "agents_by_deployment",
    "deployments",
    "secrets_by_namespace",
    *(f"children-{kind}" for kind in CHILD_RESOURCES),
)


def _configure(op: Operator, settings: kopf.OperatorSettings, indexes: dict[str, Any]) -> None:
    settings.posting.enabled = False  # Events are posted by k8s.events, on transitions only
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.GROUP, key="last-handled-configuration"
    )
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.watching.server_timeout = 600
    settings.watching.client_timeout = 660
    # kopf runs one worker per object with pending events and its HTTP pool has no limit, so
    # a burst of 1000 objects meant ~1000 workers and TLS connections (RSS 140 MB at 200
    # agents). Bounded, with workers leaving soon when idle (the default 5 s held a slot per
    # object and made 200 agents take 67 s): 113 MB and 12 s (bench/operator_scale.py).
    settings.queueing.worker_limit = KOPF_WORKERS
    settings.queueing.idle_timeout = 0.5
    for group, version, plural in CHILD_RESOURCES.values():
        # Server-side filter: only the operator's own children travel over the watch.
        selector = (group, version, plural) if group else (version, plural)
        settings.watching.label_selectors[selector] = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
    op.world.bind({name: indexes[name] for name in INDEXES})
    op.queue.start()


def _register_agents(reg: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.index(G, V, AGENTS, registry=reg, id="agents")
    async def agents(**kw: Any) -> dict[Any, Any]:
        return {(kw["namespace"], kw["name"]): owner_record(kw["body"])}

    @kopf.index(G, V, AGENTS, registry=reg, id="agents_by_namespace")
    async def agents_by_namespace(**kw: Any) -> dict[Any, Any]:
        return {kw["namespace"]: owner_record(kw["body"])}

    @kopf.index(G, V, AGENTS, registry=reg, id="agents_by_dependency")
    async def agents_by_dependency(**kw: Any) -> dict[Any, Any]:
        return {(kw["namespace"], dep): kw["name"] for dep in dependencies(kw["spec"])}

    @kopf.index(G, V, AGENTS, registry=reg, id="agents_by_deployment")
    async def agents_by_deployment(**kw: Any) -> dict[Any, Any]:
        return {(kw["namespace"], kw["spec"].get("deployment")): kw["name"]}

    @kopf.on.resume(G, V, AGENTS, registry=reg, id="reconcile")
    @kopf.on.create(G, V, AGENTS, registry=reg, id="reconcile")
    @kopf.on.update(G, V, AGENTS, registry=reg, id="reconcile")
    async def agent_changed(**kw: Any) -> None:
        op.enqueue(AGENT, kw["namespace"], kw["name"])

    @kopf.on.event(G, V, AGENTS, registry=reg, id="agent-events")
    async def agent_event(**kw: Any) -> None:
        # Whoever depends on this agent, and its deployment's counts, may see a change.
        namespace, name = kw["namespace"], kw["name"]
        for dependent in op.world.dependents_of(namespace, name):
            op.enqueue(AGENT, namespace, dependent)
        op.enqueue(DEPLOYMENT, namespace, str(kw["spec"].get("deployment")))
        if kw["type"] == "DELETED":
            op.enqueue(AGENT, namespace, name)


def _register_deployments(reg: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.index(G, V, DEPLOYMENTS, registry=reg, id="deployments")
    async def deployments(**kw: Any) -> dict[Any, Any]:
        return {(kw["namespace"], kw["name"]): owner_record(kw["body"])}

    @kopf.on.resume(G, V, DEPLOYMENTS, registry=reg, id="reconcile")
    @kopf.on.create(G, V, DEPLOYMENTS, registry=reg, id="reconcile")
    @kopf.on.update(G, V, DEPLOYMENTS, registry=reg, id="reconcile")
    async def deployment_changed(**kw: Any) -> None:
        op.enqueue(DEPLOYMENT, kw["namespace"], kw["name"])

    seen_generations: dict[tuple[str, str], int] = {}

    @kopf.on.event(G, V, DEPLOYMENTS, registry=reg, id="deployment-events")
    async def deployment_event(**kw: Any) -> None:
        # Agents render the deployment's spec: re-reconcile them when it changes or goes away,
        # not on the deployment's own status writes.
        namespace, name = kw["namespace"], kw["name"]
        deleted = kw["type"] == "DELETED"
        generation = -1 if deleted else int(kw["meta"].get("generation") or 0)
        if seen_generations.get((namespace, name)) == generation:
            return
        seen_generations[(namespace, name)] = generation
        for agent in op.world.agents_of(namespace, name):
            op.enqueue(AGENT, namespace, agent.name)
        if deleted:
            seen_generations.pop((namespace, name), None)
            op.enqueue(DEPLOYMENT, namespace, name)


def _register_secrets(reg: kopf.OperatorRegistry, op: Operator) -> None:
    @kopf.index("v1", "secrets", registry=reg, id="secrets_by_namespace")
    async def secrets_by_namespace(**kw: Any) -> dict[Any, Any]:
        return {kw["namespace"]: (kw["name"], secret_digests(kw["body"]))}

    @kopf.on.event("v1", "secrets", registry=reg, id="secret-events")
    async def secret_event(**kw: Any) -> None:
        namespace = kw["namespace"]
        for agent in op.secret_users.get((namespace, kw["name"]), set()).copy():
            op.enqueue(AGENT, namespace, agent)


def _register_children(reg: kopf.OperatorRegistry, op: Operator) -> None:
    async def child_index(**kw: Any) -> dict[Any, Any] | None:
        body = kw["body"]
        record, owner = child_record(body), controller_of(body)
        return {(kw["namespace"], owner[2]): record} if record is not None and owner is not None else None

    async def child_event(**kw: Any) -> None:
        body, namespace = kw["body"], kw["namespace"]
        owner = controller_of(body)
        if owner is None:
            return
        if kw["type"] == "DELETED":
            op.applier.forget((namespace, str(body.get("kind")), kw["name"]))
        op.enqueue(AGENT if owner[0] == names.AGENT_KIND else DEPLOYMENT, namespace, owner[1])

    for kind, (group, version, plural) in CHILD_RESOURCES.items():
        where = (f"{plural}.{version}.{group}",) if group else (version, plural)
        kopf.index(*where, labels=MANAGED, registry=reg, id=f"children-{kind}")(child_index)
        kopf.on.event(*where, labels=MANAGED, registry=reg, id=f"child-events-{kind}")(child_event)


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_login() -> kopf.ConnectionInfo | None:
    """In-cluster credentials, addressed like client-go does.

    kopf's own service-account login always dials https://kubernetes.default.svc:443; client-go
    and lightkube use KUBERNETES_SERVICE_HOST/PORT, which every kubelet sets and which also
    works where the cluster DNS name or port 443 is not available.
    """
    token_file = SERVICE_ACCOUNT / "token"
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not token_file.exists():
        return None
    host = f"[{host}]" if ":" in host else host
    namespace_file = SERVICE_ACCOUNT / "namespace"
    return kopf.ConnectionInfo(
        server=f"https://{host}:{port}",
        ca_path=str(SERVICE_ACCOUNT / "ca.crt"),
        token=token_file.read_text().strip(),
        default_namespace=namespace_file.read_text().strip() if namespace_file.exists() else None,
    )


def build_registry(op: Operator) -> kopf.OperatorRegistry:
    """A fresh registry with every handler of one operator run bound to `op`."""
    op.reconcilers = {AGENT: reconcile_agent, DEPLOYMENT: reconcile_deployment}
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg, id="login")
    async def login(**kw: Any) -> kopf.ConnectionInfo | None:
        return in_cluster_login() or kopf.login_with_kubeconfig(**kw)

    @kopf.on.startup(registry=reg, id="configure")
    async def configure(**kw: Any) -> None:
        _configure(op, kw["settings"], kw)

    _register_agents(reg, op)
    _register_deployments(reg, op)
    _register_secrets(reg, op)
    _register_children(reg, op)
    return reg
