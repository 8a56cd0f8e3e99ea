"""What the operator knows of the cluster: records kept by kopf indexes, and typed reads of them.

The index functions turn each watched object into a small frozen record (Secrets into key
digests only, never values); `World` answers the questions a reconcile asks. Reconciles read
only from here, so an idle reconcile costs no API request.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pallas_api import names
from pallas_api.spec import ServiceSpec, agent_dependencies
from pallas_operator.builders import value_digest
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
    """A PallasAgent or PallasDeployment as last seen."""

    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any]

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
    )


def secret_digests(body: Mapping[str, Any]) -> dict[str, str]:
    """Key → digest of each value of a Secret; the values themselves are dropped here."""
    return {
        key: value_digest(base64.b64decode(value or "")) for key, value in (body.get("data") or {}).items()
    }


def dependencies(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The dependencies of an agent spec as stored (read before, and whatever, validation)."""
    return tuple(agent_dependencies(spec.get("agents") or [], spec.get("dependsOn") or []))


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


class _Secrets(Mapping[str, Mapping[str, str]]):
    """The Secrets of one namespace by name (key digests only), each read only when looked up."""

    def __init__(self, index: Mapping[Any, Iterable[Any]], namespace: str) -> None:
        self._index = index
        self._namespace = namespace

    def __getitem__(self, name: str) -> Mapping[str, str]:
        digests: Mapping[str, str] | None = _one(self._index, (self._namespace, name))
        if digests is None:
            raise KeyError(name)
        return digests

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(name for ns, name in self._index if ns == self._namespace))

    def __len__(self) -> int:
        return sum(1 for ns, _ in self._index if ns == self._namespace)


class World:
    """Typed reads over the kopf indexes (bound once they exist, at operator start-up)."""

    def __init__(self) -> None:
        self._indexes: Mapping[str, Mapping[Any, Iterable[Any]]] = {}

    def bind(self, indexes: Mapping[str, Any]) -> None:
        """Read from these kopf indexes from now on."""
        self._indexes = indexes

    def agent(self, namespace: str, name: str) -> OwnerRecord | None:
        """The PallasAgent as last seen, or None."""
        record: OwnerRecord | None = _one(self._indexes["agents"], (namespace, name))
        return record

    def deployment(self, namespace: str, name: str) -> OwnerRecord | None:
        """The PallasDeployment as last seen, or None."""
        record: OwnerRecord | None = _one(self._indexes["deployments"], (namespace, name))
        return record

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

    def secrets(self, namespace: str) -> Mapping[str, Mapping[str, str]]:
        """Secret name → key digests, for the namespace (looked up lazily)."""
        return _Secrets(self._indexes["secrets"], namespace)

    def children(self, namespace: str, owner_uid: str) -> dict[tuple[str, str], ChildRecord]:
        """(kind, name) → record of every watched child of the owner."""
        out: dict[tuple[str, str], ChildRecord] = {}
        for kind in CHILD_RESOURCES:
            for record in self._indexes[f"children-{kind}"].get((namespace, owner_uid), ()):
                out[(record.kind, record.name)] = record
        return out
