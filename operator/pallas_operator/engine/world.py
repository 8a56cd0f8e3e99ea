"""What the operator knows of the cluster: records kept in indexes, and typed reads of them.

The event handlers turn each watched object into a small frozen record and `World.record` files
it; `World` answers the questions a reconcile asks. Reconciles read only from here, so an idle
reconcile costs no API request. Secrets are not among the watched objects: the operator reads
none (docs/operator.md "What the operator reads").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pallas_api import names
from pallas_api.spec import ServiceSpec, agent_dependencies
from pallas_api.workflow import WorkflowSpec
from pallas_operator.engine.indexes import Index, ObjectKey
from pallas_operator.k8s.apply import Seen, seen
from pallas_operator.status import AgentFacts, Workload, workload

DEFAULT_SERVICE_PORT = ServiceSpec().port
CHILD_RESOURCES: dict[str, tuple[str, str, str]] = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Deployment": ("apps", "v1", "deployments"),
    "Service": ("", "v1", "services"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "ServiceAccount": ("", "v1", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies"),
}
"""Child kinds the operator watches (ServiceMonitors are optional and not watched)."""


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """A PallasAgent, PallasDeployment or PallasTrigger as last seen."""

    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    finalizers: tuple[str, ...] = ()
    deleting_since: str | None = None
    """`metadata.deletionTimestamp`: set once a delete waits for finalizers."""
    created: str = ""
    """metadata.creationTimestamp (RFC 3339): where a new PallasTrigger's schedule counts from."""

    def condition(self, type_: str) -> str | None:
        """The status (`True`/`False`/`Unknown`) of a condition, or None when absent."""
        for cond in self.status.get("conditions") or []:
            if cond.get("type") == type_:
                return str(cond.get("status"))
        return None


@dataclass(frozen=True, slots=True)
class ChildRecord:
    """A child object as last seen: enough to decide whether to re-apply and to read availability."""

    kind: str
    name: str
    owner_kind: str
    seen: Seen
    workload: Workload | None
    loop_sized: bool = False
    """A Deployment whose `spec.replicas` the scaling loop's field manager owns (so the
    reconcile's apply may leave them out without the API server resetting them)."""


def owner_record(body: Mapping[str, Any]) -> OwnerRecord:
    """The record of a PallasAgent or PallasDeployment body."""
    meta = body.get("metadata") or {}
    return OwnerRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion", "")),
        spec=dict(body.get("spec") or {}),
        status=dict(body.get("status") or {}),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        deleting_since=str(meta["deletionTimestamp"]) if meta.get("deletionTimestamp") else None,
        created=str(meta.get("creationTimestamp") or ""),
    )


def controller_of(body: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, name, uid) of the Pallas resource controlling this object, if one does."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and str(ref.get("apiVersion", "")).startswith(f"{names.GROUP}/"):
            return str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid"))
    return None


def child_record(body: Mapping[str, Any]) -> ChildRecord | None:
    """The record of a child, or None when no Pallas resource controls it."""
    owner = controller_of(body)
    if owner is None:
        return None
    kind = str(body.get("kind"))
    return ChildRecord(
        kind=kind,
        name=str((body.get("metadata") or {}).get("name")),
        owner_kind=owner[0],
        seen=seen(body),
        workload=workload(body) if kind == "Deployment" else None,
        loop_sized=kind == "Deployment" and _loop_sized(body),
    )


def _loop_sized(body: Mapping[str, Any]) -> bool:
    return any(
        m.get("manager") == names.SCALING_FIELD_MANAGER
        and "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})
        for m in (body.get("metadata") or {}).get("managedFields") or []
    )


def dependencies(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The dependencies of an agent spec as stored (read before, and whatever, validation).

    `agents`, the workflow's steps that are not `a2aAgents`, and `dependsOn`: an agent is
    reconciled again when one of them comes, changes or goes.
    """
    called = [*(spec.get("agents") or []), *_workflow_steps(spec)]
    return tuple(agent_dependencies(called, spec.get("dependsOn") or []))


def _workflow_steps(spec: Mapping[str, Any]) -> list[str]:
    """The PallasAgents a stored workflow calls; none when it is not valid (its reconcile says why)."""
    raw = spec.get("workflow")
    if not raw:
        return []
    try:
        steps = WorkflowSpec.model_validate(raw).steps()
    except ValidationError:
        return []
    external = set(spec.get("a2aAgents") or [])
    return [step for step in steps if step not in external]


def facts(record: OwnerRecord) -> AgentFacts:
    """What other agents' reconciles need to know of an agent."""
    return AgentFacts(
        name=record.name,
        deployment=str(record.spec.get("deployment", "")),
        dependencies=dependencies(record.spec),
        ready=record.condition("Ready") == "True",
        port=int((record.spec.get("service") or {}).get("port", DEFAULT_SERVICE_PORT)),
    )


def _one(index: Mapping[Any, Iterable[Any]], key: Any) -> Any:
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


class _AgentFacts(Mapping[str, AgentFacts]):
    """The agents of one namespace by name, each read only when looked up.

    A reconcile looks up a handful of agents (its dependencies, a cycle's path); building all of
    a namespace's facts for every reconcile made a restart over N agents cost O(N²).
    """

    def __init__(self, world: World, namespace: str) -> None:
        self._world = world
        self._namespace = namespace

    def __getitem__(self, name: str) -> AgentFacts:
        record = self._world.agent(self._namespace, name)
        if record is None:
            raise KeyError(name)
        return facts(record)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({r.name for r in self._world.records_in(self._namespace)}))

    def __len__(self) -> int:
        return len({r.name for r in self._world.records_in(self._namespace)})


INDEXES = (
    "agents",
    "agents_by_namespace",
    "agents_by_dependency",
    "agents_by_deployment",
    "deployments",
    "triggers",
    "triggers_by_agent",
    *(f"children-{kind}" for kind in CHILD_RESOURCES),
)


def contributions(kind: str, body: Mapping[str, Any]) -> dict[str, dict[Any, Any] | None]:
    """What an object of `kind` files under each index it belongs to."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    if kind == names.AGENT_KIND:
        record, spec = owner_record(body), body.get("spec") or {}
        return {
            "agents": {(namespace, name): record},
            "agents_by_namespace": {namespace: record},
            "agents_by_dependency": {(namespace, dep): name for dep in dependencies(spec)},
            "agents_by_deployment": {(namespace, spec.get("deployment")): name},
        }
    if kind == names.DEPLOYMENT_KIND:
        return {"deployments": {(namespace, name): owner_record(body)}}
    if kind == names.TRIGGER_KIND:
        agent = (body.get("spec") or {}).get("agent")
        return {
            "triggers": {(namespace, name): owner_record(body)},
            "triggers_by_agent": {(namespace, str(agent)): name} if agent else None,
        }
    child, owner = child_record(body), controller_of(body)
    filed = {(namespace, owner[2]): child} if child is not None and owner is not None else None
    return {f"children-{kind}": filed}


class World:
    """Typed reads over the indexes of every watched object."""

    def __init__(self) -> None:
        self._indexes: dict[str, Index] = {name: Index() for name in INDEXES}

    def record(self, kind: str, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """File an object as last seen (or forget it when deleted)."""
        meta = body.get("metadata") or {}
        obj: ObjectKey = (kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
        if deleted:  # no records to build: the object's contributions are keyed by it
            for index in self._indexes.values():
                index.remove(obj)
            return
        for name, contributed in contributions(kind, body).items():
            self._indexes[name].put(obj, contributed)

    def agent(self, namespace: str, name: str) -> OwnerRecord | None:
        """The PallasAgent as last seen, or None."""
        record: OwnerRecord | None = _one(self._indexes["agents"], (namespace, name))
        return record

    def deployment(self, namespace: str, name: str) -> OwnerRecord | None:
        """The PallasDeployment as last seen, or None."""
        record: OwnerRecord | None = _one(self._indexes["deployments"], (namespace, name))
        return record

    def trigger(self, namespace: str, name: str) -> OwnerRecord | None:
        """The PallasTrigger as last seen, or None."""
        record: OwnerRecord | None = _one(self._indexes["triggers"], (namespace, name))
        return record

    def triggers_of(self, namespace: str, agent: str) -> set[str]:
        """Triggers that name `agent` (its URL and readiness are theirs to read)."""
        return set(self._indexes["triggers_by_agent"].get((namespace, agent), ()))

    def records_in(self, namespace: str) -> Iterable[OwnerRecord]:
        """Every agent of the namespace as last seen."""
        records: Iterable[OwnerRecord] = self._indexes["agents_by_namespace"].get(namespace, ())
        return records

    def agents_in(self, namespace: str) -> Mapping[str, AgentFacts]:
        """Every agent of the namespace, by name (looked up lazily)."""
        return _AgentFacts(self, namespace)

    def agents_of(self, namespace: str, deployment: str) -> list[OwnerRecord]:
        """The agents of a deployment, by name."""
        names_ = self._indexes["agents_by_deployment"].get((namespace, deployment), ())
        return [r for n in sorted(set(names_)) if (r := self.agent(namespace, n)) is not None]

    def dependents_of(self, namespace: str, agent: str) -> set[str]:
        """Agents that list `agent` in `agents` or `dependsOn`."""
        return set(self._indexes["agents_by_dependency"].get((namespace, agent), ()))

    def children(self, namespace: str, owner_uid: str) -> dict[tuple[str, str], ChildRecord]:
        """(kind, name) → record of every watched child of the owner."""
        out: dict[tuple[str, str], ChildRecord] = {}
        for kind in CHILD_RESOURCES:
            for record in self._indexes[f"children-{kind}"].get((namespace, owner_uid), ()):
                out[(record.kind, record.name)] = record
        return out
