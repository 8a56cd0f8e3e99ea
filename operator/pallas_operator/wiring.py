"""The kopf registrations: what is watched, and which events queue which reconciles.

kopf event handlers here only record and route: each event is filed in the operator's own
indexes (`World.record`; no kopf indexes, whose start-up barrier costs O(N²)), and every trigger
ends in `Operator.enqueue`. The queue runs the one idempotent reconcile per resource. (Handlers
take `**kw`: kopf passes everything by keyword, and its typed protocols want exactly that.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
from lightkube.core.selector import build_selector

from pallas_api import names
from pallas_operator.engine.context import AGENT, DEPLOYMENT, TRIGGER, Operator
from pallas_operator.engine.indexes import ObjectKey
from pallas_operator.engine.world import CHILD_RESOURCES, controller_of
from pallas_operator.k8s.listing import ALL_NAMESPACES
from pallas_operator.reconcile.agent import reconcile_agent
from pallas_operator.reconcile.deployment import reconcile_deployment
from pallas_operator.reconcile.trigger import reconcile_trigger

MANAGED: dict[str, Any] = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
LIST_PAGE = 500
"""Objects per page of kopf's initial listing of each watched kind."""
AGENT_COUNTS_DELAY = 1.0
"""Seconds an agent's event waits before it reconciles the agent's deployment.

The deployment's reconcile reads all of its agents (counts, the kubernetes-mode Role's names):
O(N). Every agent event asking for it at once made a convergence of N agents run it
continually, O(N) each time (32 ms at 5,000 agents): the asks within this window are one
reconcile, so it runs at most about once a second whatever N is, and the deployment's status
trails its agents' by about a second."""
G, V = names.GROUP, names.VERSION
AGENTS, DEPLOYMENTS, TRIGGERS = names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL, names.TRIGGER_PLURAL


@dataclass(frozen=True, slots=True)
class Watched:
    """One watched kind, with the server-side selectors its watch uses."""

    selector: tuple[str, str] | tuple[str, str, str]
    """kopf's resource selector: (group, version, plural), or (version, plural) for the core group."""
    labels: dict[str, Any] | None = None


WATCHED: dict[str, Watched] = {
    names.AGENT_KIND: Watched((G, V, AGENTS)),
    names.DEPLOYMENT_KIND: Watched((G, V, DEPLOYMENTS)),
    names.TRIGGER_KIND: Watched((G, V, TRIGGERS)),
    **{
        kind: Watched((group, version, plural) if group else (version, plural), MANAGED)
        for kind, (group, version, plural) in CHILD_RESOURCES.items()
    },
}
"""Every kind kopf watches; only these selectors' objects travel over the watches."""


class _NoDiffBase(kopf.DiffBaseStorage):
    """No "last handled" essence: the operator registers event handlers only.

    kopf builds the essence of every object at every event (a deep copy of the body, then the
    progress fields cleared) to diff it for create/update handlers and daemons, of which there
    are none here; that was 12 % of the operator's CPU while 2,500 agents converged and 18 % at
    a restart over them. Nothing is ever stored, so nothing is fetched.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _configure(op: Operator, settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # Events are posted by k8s.events, on transitions only
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.watching.server_timeout = 600
    # The initial listing in pages, as `k8s.listing` does: kopf's default takes each kind in one
    # response, whose body and decoded objects all live at once (a restart over 2,500 agents and
    # their 7,500 children peaked at twice a start's RSS).
    settings.watching.chunk_size = LIST_PAGE
    settings.watching.client_timeout = 660
    # No worker limit: with kopf indexes, a limit below the number of existing objects
    # deadlocked start-up (kopf docs, "Precautions for huge clusters"; kopf#1243). There are no
    # kopf indexes any more, but a limit would still only queue events: workers are cheap tasks
    # here (handlers only record and enqueue, kopf writes nothing to our objects) and leave soon
    # when idle; the reconciles themselves run on the work queue's fixed workers.
    settings.queueing.worker_limit = None
    settings.queueing.idle_timeout = 0.5
    for watched in WATCHED.values():
        if watched.labels:
            settings.watching.label_selectors[watched.selector] = build_selector(watched.labels)


async def existing_objects(op: Operator) -> set[ObjectKey]:
    """Every watched object that exists now, as the watches select them (the start-up barrier)."""
    namespaces = op.settings.namespaces or (ALL_NAMESPACES,)
    found: set[ObjectKey] = set()
    for kind, watched in WATCHED.items():
        listed = await op.cluster.names_of(kind, namespaces, watched.labels)
        found.update((kind, namespace, name) for namespace, name in listed)
    return found


def _record(op: Operator, kind: str, kw: dict[str, Any]) -> None:
    """File the event's object in the world (before anything reads it); the handler routes it next."""
    op.world.record(kind, kw["body"], deleted=kw["type"] == "DELETED")
    op.startup.indexed((kind, kw["namespace"], kw["name"]))
    op.startup.handled(kind)


class _Generations:
    """The generation each object was last reconciled for: its own status writes need no reconcile."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}

    def changed(self, kw: dict[str, Any]) -> bool:
        key = (kw["namespace"], kw["name"])
        if kw["type"] == "DELETED":
            self._seen.pop(key, None)
            return True
        if kw["meta"].get("deletionTimestamp"):  # a finalizer's work: each change may be its step
            return True
        generation = int(kw["meta"].get("generation") or 0)
        if kw["type"] is None or self._seen.get(key) != generation:  # listed, created or edited
            self._seen[key] = generation
            return True
        return False


def _register_agents(reg: kopf.OperatorRegistry, op: Operator) -> None:
    generations = _Generations()

    @kopf.on.event(G, V, AGENTS, registry=reg, id="agent-events")
    async def agent_event(**kw: Any) -> None:
        # Events, not kopf's create/update/resume handlers: those make kopf patch every object
        # it handles (its diff-base and progress annotations), a write per object at every start.
        _record(op, names.AGENT_KIND, kw)
        namespace, name = kw["namespace"], kw["name"]
        if generations.changed(kw):
            op.enqueue(AGENT, namespace, name)
        # Whoever depends on this agent, and its deployment's counts, may see a change.
        for dependent in op.world.dependents_of(namespace, name):
            op.enqueue(AGENT, namespace, dependent)
        deployment = kw["spec"].get("deployment")
        if deployment:  # required by the CRD; an object that slipped past it belongs to nobody
            op.enqueue(DEPLOYMENT, namespace, str(deployment), AGENT_COUNTS_DELAY)
        for trigger in op.world.triggers_of(namespace, name):  # its URL is where they send runs
            op.enqueue(TRIGGER, namespace, trigger)


def _register_deployments(reg: kopf.OperatorRegistry, op: Operator) -> None:
    generations = _Generations()

    @kopf.on.event(G, V, DEPLOYMENTS, registry=reg, id="deployment-events")
    async def deployment_event(**kw: Any) -> None:
        # Agents render the deployment's spec: re-reconcile them when it changes or goes away,
        # not on the deployment's own status writes.
        _record(op, names.DEPLOYMENT_KIND, kw)
        namespace, name = kw["namespace"], kw["name"]
        if not generations.changed(kw):
            return
        op.enqueue(DEPLOYMENT, namespace, name)
        for agent in op.world.agents_of(namespace, name):
            op.enqueue(AGENT, namespace, agent.name)


def _register_triggers(reg: kopf.OperatorRegistry, op: Operator) -> None:
    generations = _Generations()

    @kopf.on.event(G, V, TRIGGERS, registry=reg, id="trigger-events")
    async def trigger_event(**kw: Any) -> None:
        # Its own status writes (every run) need no reconcile: only a new generation does.
        _record(op, names.TRIGGER_KIND, kw)
        if generations.changed(kw):
            op.enqueue(TRIGGER, kw["namespace"], kw["name"])


def _register_children(reg: kopf.OperatorRegistry, op: Operator) -> None:
    def child_event(kind: str) -> Any:
        async def event(**kw: Any) -> None:
            _record(op, kind, kw)
            body, namespace = kw["body"], kw["namespace"]
            owner = controller_of(body)
            if owner is None:
                return
            if kw["type"] == "DELETED":
                op.applier.forget((namespace, str(body.get("kind")), kw["name"]))
            op.enqueue(AGENT if owner[0] == names.AGENT_KIND else DEPLOYMENT, namespace, owner[1])

        return event

    for kind, (group, version, plural) in CHILD_RESOURCES.items():
        where = (f"{plural}.{version}.{group}",) if group else (version, plural)
        kopf.on.event(*where, labels=MANAGED, registry=reg, id=f"child-events-{kind}")(child_event(kind))


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


RECONCILERS = {AGENT: reconcile_agent, DEPLOYMENT: reconcile_deployment, TRIGGER: reconcile_trigger}
"""The reconcile of each kind of key on the work queue."""


def build_kopf_registry(op: Operator) -> kopf.OperatorRegistry:
    """A fresh kopf registry with every handler of one operator run bound to `op`."""
    reg = kopf.OperatorRegistry()

    @kopf.on.login(registry=reg, id="login")
    async def login(**kw: Any) -> kopf.ConnectionInfo | None:
        return in_cluster_login() or kopf.login_with_kubeconfig(**kw)

    @kopf.on.startup(registry=reg, id="configure")
    async def configure(**kw: Any) -> None:
        _configure(op, kw["settings"])

    _register_agents(reg, op)
    _register_deployments(reg, op)
    _register_triggers(reg, op)
    _register_children(reg, op)
    return reg
