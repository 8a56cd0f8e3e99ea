"""An in-memory `Cluster` (the operator's port to the API server) for unit tests.

It keeps objects by (kind, namespace, name) and records every write in order: applies,
deletions, status writes, Events, pod syncs and minted tokens. An apply stores the applied body
as it is (no merge: server-side apply's field ownership is the integration tier's subject, bar
the one field the scaling loop's manager owns, a Deployment's replicas, which an apply leaving it
out keeps) with
a managedFields entry of the operator's field manager, as the API server answers, so the
applier's no-op check works on it as on the real thing. `load` pre-loads objects; `watch`
files what is stored into a `World` the way the operator's watches would. `watch_objects` (the
event triggers' watches) lists what is stored, then yields what a test `emit`s.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pallas_api import names
from pallas_operator.engine.context import AGENT, DEPLOYMENT, TRIGGER, Operator
from pallas_operator.engine.world import CHILD_RESOURCES, World
from pallas_operator.k8s.apply import Seen, seen
from pallas_operator.k8s.cluster import Cluster, OwnerEvent, WatchedKind, WatchEvent, WatchType
from pallas_operator.k8s.delegations import DelegationBinding
from pallas_operator.k8s.listing import ALL_NAMESPACES
from pallas_operator.metrics import OperatorMetrics
from pallas_operator.reconcile.agent import reconcile_agent
from pallas_operator.reconcile.deployment import reconcile_deployment
from pallas_operator.reconcile.trigger import reconcile_trigger
from pallas_operator.settings import OperatorSettings

ObjectKey = tuple[str, str, str]
"""(kind, namespace, name); the namespace is "" for a cluster-scoped object."""
WATCHED_KINDS = (names.AGENT_KIND, names.DEPLOYMENT_KIND, names.TRIGGER_KIND, *CHILD_RESOURCES)


def key_of(body: Mapping[str, Any]) -> ObjectKey:
    """(kind, namespace, name) of an object body."""
    meta = body["metadata"]
    return (str(body["kind"]), str(meta.get("namespace", "")), str(meta["name"]))


def _matches(body: Mapping[str, Any], labels: Mapping[str, str] | None) -> bool:
    have = (body.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in (labels or {}).items())


@dataclass
class FakeCluster:
    """The API server in memory: what the operator wrote, and what a test put there."""

    objects: dict[ObjectKey, dict[str, Any]] = field(default_factory=dict)
    applied: list[dict[str, Any]] = field(default_factory=list)
    """Every applied body, in order."""
    deleted: list[ObjectKey] = field(default_factory=list)
    statuses: list[tuple[ObjectKey, dict[str, Any]]] = field(default_factory=list)
    """Every status written, with the owner it was written to."""
    events: list[OwnerEvent] = field(default_factory=list)
    synced: list[tuple[str, dict[str, str], str]] = field(default_factory=list)
    """(namespace, labels, config hash) of every pod sync asked for."""
    tokens: list[tuple[str, str]] = field(default_factory=list)
    finalizer_writes: list[tuple[ObjectKey, list[str]]] = field(default_factory=list)
    """Every finalizer list written, with its owner."""
    scaled: list[tuple[str, str, int]] = field(default_factory=list)
    """(namespace, Deployment, replicas) of every write of the scaling loop's field manager."""
    service_monitor_crd: bool = True
    """Whether the ServiceMonitor kind is served (the Prometheus Operator installed)."""
    watches_opened: list[tuple[WatchedKind, str]] = field(default_factory=list)
    """Every watch of `watch_objects` opened, with its namespace ("*": all)."""
    broken_watches: int = 0
    """How many of the next watches fail (a RuntimeError) right after their list."""
    _watchers: list[tuple[WatchedKind, str, asyncio.Queue[WatchEvent]]] = field(default_factory=list)
    _versions: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def load(self, *bodies: Mapping[str, Any]) -> None:
        """Put objects there as if someone else had created them (with a uid and a generation)."""
        for body in bodies:
            obj = copy.deepcopy(dict(body))
            meta = obj["metadata"]
            meta.setdefault("uid", "uid-{}-{}".format(*key_of(obj)[::2]))
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._version()
            self.objects[key_of(obj)] = obj

    def watch(self, world: World) -> None:
        """File every stored object of a watched kind in `world`, as the watch events would."""
        for (kind, _, _), body in self.objects.items():
            if kind in WATCHED_KINDS:
                world.record(kind, copy.deepcopy(body))

    def writes(self) -> int:
        """How many write requests were made (applies, deletes, status writes, Events, finalizers)."""
        return (
            len(self.applied) + len(self.deleted) + len(self.statuses) + len(self.events)
            + len(self.finalizer_writes) + len(self.scaled)
        )  # fmt: skip

    def _version(self) -> str:
        return str(next(self._versions))

    async def create_secret(self, manifest: Mapping[str, Any]) -> bool:
        """Store the Secret unless one of its name is there; whether it was stored."""
        body = copy.deepcopy(dict(manifest))
        key = key_of(body)
        if key in self.objects:
            return False
        body["metadata"] = {**body["metadata"], "resourceVersion": self._version()}
        self.objects[key] = body
        return True

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Store the body with the operator's managedFields entry; the stored object."""
        body = copy.deepcopy(dict(manifest))
        self.applied.append(copy.deepcopy(body))
        entry: dict[str, Any] = {
            "manager": names.FIELD_MANAGER,
            "operation": "Apply",
            "apiVersion": body.get("apiVersion"),
            "fieldsV1": {f"f:{k}": {} for k in sorted(body) if k not in ("apiVersion", "kind")},
        }
        key = key_of(body)
        managed = [entry, *_scaling_entries(self.objects.get(key, {}), body)]
        body["metadata"] = {**body["metadata"], "managedFields": managed, "resourceVersion": self._version()}
        if "status" in self.objects.get(key, {}):  # an apply does not touch what others wrote
            body["status"] = self.objects[key]["status"]
        self.objects[key] = body
        return copy.deepcopy(body)

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        """Forget the object (one already gone is fine) and record the request."""
        self.deleted.append((kind, namespace, name))
        self.objects.pop((kind, namespace, name), None)

    async def write_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> str | None:
        """Record the status, and set it on the stored owner if there is one."""
        key = (kind, namespace, name)
        self.statuses.append((key, copy.deepcopy(dict(status))))
        version = self._version()
        if key in self.objects:
            self.objects[key]["status"] = copy.deepcopy(dict(status))
            self.objects[key]["metadata"]["resourceVersion"] = version
        return version

    async def set_finalizers(
        self, kind: str, namespace: str, name: str, finalizers: Sequence[str], resource_version: str
    ) -> bool:
        """Record the finalizers (False: a stale `resource_version`, the API server's 409).

        Removing the last finalizer of a deleted object lets it go, as the API server does.
        """
        key = (kind, namespace, name)
        body = self.objects.get(key)
        if body is None:
            return True
        meta = body["metadata"]
        if meta["resourceVersion"] != resource_version:
            return False
        self.finalizer_writes.append((key, list(finalizers)))
        meta["finalizers"] = list(finalizers)
        meta["resourceVersion"] = self._version()
        if meta.get("deletionTimestamp") and not finalizers:
            del self.objects[key]
        return True

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the stored object, or None."""
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def owned_service_monitors(self, namespace: str, deployment: str) -> dict[str, Seen] | None:
        """The stored ServiceMonitors labelled as the deployment's; None without their CRD."""
        if not self.service_monitor_crd:
            return None
        labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_DEPLOYMENT: deployment}
        return {
            name: seen(body)
            for (kind, ns, name), body in self.objects.items()
            if kind == "ServiceMonitor" and ns == namespace and _matches(body, labels)
        }

    async def delegation_bindings(self, namespaces: Sequence[str]) -> list[DelegationBinding]:
        """The stored ClusterRoleBindings labelled as the operator's, for `namespaces` (empty: all)."""
        found = []
        for (kind, _, name), body in sorted(self.objects.items()):
            labels = body["metadata"].get("labels") or {}
            if kind != "ClusterRoleBinding" or labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
                continue
            namespace, deployment = labels.get(names.LABEL_NAMESPACE), labels.get(names.LABEL_DEPLOYMENT)
            if namespace is None or deployment is None or (namespaces and namespace not in namespaces):
                continue
            found.append(DelegationBinding(name, namespace, deployment))
        return found

    async def sync_pods(self, namespace: str, labels: Mapping[str, str], config_hash: str) -> int:
        """Annotate the stored live Pods matching `labels` that lack `config_hash`; how many."""
        self.synced.append((namespace, dict(labels), config_hash))
        patched = 0
        for (kind, ns, _), body in self.objects.items():
            meta = body["metadata"]
            if (
                kind != "Pod"
                or ns != namespace
                or not _matches(body, labels)
                or meta.get("deletionTimestamp")
            ):
                continue
            annotations = meta.setdefault("annotations", {})
            if annotations.get(names.ANNOTATION_CONFIG_SYNC) != config_hash:
                annotations[names.ANNOTATION_CONFIG_SYNC] = config_hash
                patched += 1
        return patched

    async def ready_pod_ips(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        """The `status.podIP` of each stored Pod matching `labels` that is Ready and not stopping."""
        found = []
        for (kind, ns, _), body in self.objects.items():
            status = body.get("status") or {}
            conditions = status.get("conditions") or ()
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            live = ready and status.get("podIP") and not body["metadata"].get("deletionTimestamp")
            if kind == "Pod" and ns == namespace and _matches(body, labels) and live:
                found.append(str(status["podIP"]))
        return found

    async def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set the stored Deployment's replicas, owned by the scaling manager (later applies keep them)."""
        self.scaled.append((namespace, name, replicas))
        body = self.objects[("Deployment", namespace, name)]
        body.setdefault("spec", {})["replicas"] = replicas
        meta = body["metadata"]
        others = [
            m for m in meta.get("managedFields") or [] if m.get("manager") != names.SCALING_FIELD_MANAGER
        ]
        scaling = {"manager": names.SCALING_FIELD_MANAGER, "operation": "Apply", "apiVersion": "apps/v1",
                   "fieldsV1": {"f:spec": {"f:replicas": {}}}}  # fmt: skip
        meta["managedFields"] = [*others, scaling]
        meta["resourceVersion"] = self._version()

    async def post_event(self, event: OwnerEvent) -> None:
        """Record the Event."""
        self.events.append(event)

    async def names_of(
        self, kind: str, namespaces: Sequence[str], labels: Mapping[str, str] | None = None
    ) -> list[tuple[str, str]]:
        """(namespace, name) of the stored objects of `kind` matching `labels`."""
        return [
            (ns, name)
            for (k, ns, name), body in sorted(self.objects.items())
            if k == kind and (ALL_NAMESPACES in namespaces or ns in namespaces) and _matches(body, labels)
        ]

    async def watch_objects(self, kind: WatchedKind, namespace: str) -> AsyncIterator[WatchEvent]:
        """The stored objects of `kind` as LISTED, then every matching `emit`, until cancelled."""
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        entry: tuple[WatchedKind, str, asyncio.Queue[WatchEvent]] = (kind, namespace, queue)
        self.watches_opened.append((kind, namespace))
        self._watchers.append(entry)
        try:
            for body in [b for _, b in sorted(self.objects.items()) if _of_kind(kind, namespace, b)]:
                yield WatchEvent("LISTED", copy.deepcopy(body))
            if self.broken_watches:
                self.broken_watches -= 1
                raise RuntimeError("the watch broke")
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(entry)

    def emit(self, type_: WatchType, body: Mapping[str, Any]) -> None:
        """A change made by someone else: stored (or forgotten), and sent to the open watches."""
        obj = copy.deepcopy(dict(body))
        obj["metadata"] = {**obj["metadata"], "resourceVersion": self._version()}
        if type_ == "DELETED":
            self.objects.pop(key_of(obj), None)
        else:
            self.objects[key_of(obj)] = obj
        for kind, namespace, queue in self._watchers:
            if _of_kind(kind, namespace, obj):
                queue.put_nowait(WatchEvent(type_, copy.deepcopy(obj)))

    def undelivered(self) -> int:
        """Events emitted that an open watch has not handed on yet."""
        return sum(queue.qsize() for _, _, queue in self._watchers)

    def watching(self) -> list[tuple[str, str]]:
        """(resource, namespace) of every watch open now."""
        return [(kind.plural, namespace) for kind, namespace, _ in self._watchers]

    async def mint_token(
        self, namespace: str, service_account: str, audiences: Sequence[str], seconds: int
    ) -> str:
        """A made-up token naming the ServiceAccount."""
        self.tokens.append((namespace, service_account))
        return f"token-of-{namespace}-{service_account}"


def _scaling_entries(stored: Mapping[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """The scaling manager's entry of `stored`, its replicas carried into `body` when it omits them.

    What server-side apply does to a field another manager still owns: it stays.
    """
    entries = [
        m for m in (stored.get("metadata") or {}).get("managedFields") or []
        if m.get("manager") == names.SCALING_FIELD_MANAGER
    ]  # fmt: skip
    replicas = (stored.get("spec") or {}).get("replicas")
    if entries and replicas is not None and "replicas" not in body.get("spec", {}):
        body["spec"] = {**body.get("spec", {}), "replicas": replicas}
    return entries


def _of_kind(kind: WatchedKind, namespace: str, body: Mapping[str, Any]) -> bool:
    group = str(body.get("apiVersion", "")).rpartition("/")[0]
    where = str((body.get("metadata") or {}).get("namespace", ""))
    return body.get("kind") == kind.kind and group == kind.group and namespace in (ALL_NAMESPACES, where)


def _conforms(cluster: FakeCluster) -> Cluster:
    return cluster  # mypy checks here that the fake has every method of the port


def operator_with(*bodies: Mapping[str, Any], **settings: Any) -> tuple[Operator, FakeCluster]:
    """An operator whose watches have shown `bodies`, on a cluster holding them."""
    cluster = FakeCluster()
    cluster.load(*bodies)
    op = in_memory_operator(cluster, **settings)
    cluster.watch(op.world)
    return op, cluster


def condition(status: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """The condition of `type_` in a written status."""
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == type_)
    return found


def in_memory_operator(cluster: FakeCluster, **settings: Any) -> Operator:
    """An `Operator` on `cluster`, as the runner builds one, with nothing started.

    Its queue, prober and provider reports start no task until asked to, so a reconcile called
    directly runs in the test's event loop and touches nothing but the fake.
    """
    values: dict[str, Any] = {"namespaces": ("default",), "runtime_image": "pallas:test", "http_port": None}
    values.update(settings)
    reconcilers = {AGENT: reconcile_agent, DEPLOYMENT: reconcile_deployment, TRIGGER: reconcile_trigger}
    return Operator(OperatorSettings(**values), cluster, OperatorMetrics(), reconcilers)
