"""The only writer of children and status: each apply, status write or delete, unless a no-op.

The requests themselves go through the `Cluster` port (`k8s.cluster`); what is decided here is
whether a write is needed at all.

Every write uses one field manager, `pallas-operator`, and `force`: the operator owns the
fields it sets and takes them back from whoever changed them (that is drift repair).

An apply is skipped when it would change nothing: the observed object carries the digest of
exactly the desired manifest (the `pallas.dev/applied-hash` annotation every apply sets) and
still carries exactly the fields this manager set (its managedFields entry is unchanged since
this process first saw or applied it). A hand edit of one of those fields moves it to another
manager, which changes the entry, so the next reconcile applies again; other writers (the
Deployment controller's status) leave it alone, so they cost no write. Because the digest
lives on the object, a restarted operator (or a new leader) writes nothing to children that are
already what it wants.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pallas_api import names
from pallas_operator.k8s.cluster import Cluster

log = logging.getLogger(__name__)
ChildKey = tuple[str, str, str]
"""(namespace, kind, name)"""
OwnerKey = tuple[str, str, str]
"""(namespace, kind, name) of a PallasAgent or PallasDeployment"""
WriteHook = Callable[[str, str], None]
"""Called with (kind, verb) for every write request, for the metrics."""


def fingerprint(obj: Mapping[str, Any]) -> str:
    """A digest of the fields this operator's field manager owns in `obj` ("" if none)."""
    entries = [
        {"apiVersion": m.get("apiVersion"), "fields": m.get("fieldsV1")}
        for m in (obj.get("metadata") or {}).get("managedFields") or []
        if m.get("manager") == names.FIELD_MANAGER
        and m.get("operation") == "Apply"
        and not m.get("subresource")
    ]
    if not entries:
        return ""
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def _digest(manifest: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Seen:
    """What the watch last showed of a child: enough to tell whether applying it would change anything."""

    fingerprint: str
    """`fingerprint()` of the object: the fields this operator's manager owns."""
    applied_hash: str
    """The digest of the manifest last applied to it ("" when it carries none)."""


def seen(obj: Mapping[str, Any]) -> Seen:
    """The `Seen` of an object as the API server returned it."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return Seen(fingerprint(obj), str(annotations.get(names.ANNOTATION_APPLIED_HASH, "")))


def _stamped(manifest: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """A copy of the manifest carrying its own digest as an annotation."""
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), names.ANNOTATION_APPLIED_HASH: digest}
    return {**manifest, "metadata": meta}


def child_key(manifest: Mapping[str, Any]) -> ChildKey:
    """(namespace, kind, name) of a manifest; the namespace is "" for a cluster-scoped one."""
    meta = manifest["metadata"]
    return (meta.get("namespace", ""), manifest["kind"], meta["name"])


def owner_key(manifest: Mapping[str, Any]) -> OwnerKey | None:
    """(namespace, kind, name) of the resource controlling a manifest, if one in its namespace does."""
    meta = manifest["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return (meta.get("namespace", ""), str(ref.get("kind")), str(ref.get("name")))
    return None


@dataclass(frozen=True, slots=True)
class _Applied:
    digest: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class _Written:
    status: dict[str, Any]
    resource_version: int


def _rv(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:  # resourceVersions are opaque by contract; etcd-backed ones are integers
        return 0


class Applier:
    """Applies children and writes status, skipping what would be a no-op."""

    def __init__(self, cluster: Cluster, on_write: WriteHook | None = None) -> None:
        self._cluster = cluster
        self._on_write = on_write or (lambda kind, verb: None)
        self._applied: dict[ChildKey, _Applied] = {}
        # The API server's answer to an apply, kept only until the watch shows the object: a
        # reconcile in between (another child's watch event) reads it from here, not as absent.
        self._unseen: dict[ChildKey, dict[str, Any]] = {}
        # The children applied for each owner, so that a deleted owner takes all it left here
        # with it: the garbage collector removes the children, and a child kind no watch shows
        # (a ServiceMonitor), or a DELETED event lost to a watch restart, would otherwise keep
        # its entries for the life of the process.
        self._children: dict[OwnerKey, set[ChildKey]] = {}
        self._owner: dict[ChildKey, OwnerKey] = {}
        self._written: dict[OwnerKey, _Written] = {}

    def _current(self, key: ChildKey, digest: str, observed: Seen | None) -> bool:
        """Whether the object already is what applying `digest` would make it."""
        before = self._applied.get(key)
        if observed is None:  # not seen by the watch: created by our last apply, or not at all
            return before is not None and before.digest == digest
        self._unseen.pop(key, None)
        if observed.applied_hash != digest or not observed.fingerprint:
            return False
        if before is None or before.digest != digest:
            # First sight in this process (a restart, a new leader) of a child that already
            # carries what we want: it becomes the baseline later drift is measured against.
            self._applied[key] = _Applied(digest, observed.fingerprint)
            return True
        return observed.fingerprint == before.fingerprint

    async def apply(self, manifest: Mapping[str, Any], observed: Seen | None) -> dict[str, Any] | None:
        """Apply `manifest` unless nothing would change; returns the applied object, or None if skipped.

        `observed` is what the watch last showed of the object, or None when the watch has not
        seen it (not created yet, or created by the last apply and not seen yet: a deletion
        makes the caller `forget()` the object first).
        """
        key = child_key(manifest)
        digest = _digest(manifest)
        if self._current(key, digest, observed):
            return None
        applied = await self._cluster.apply(_stamped(manifest, digest))
        self._on_write(manifest["kind"], "apply")
        self._applied[key] = _Applied(digest, fingerprint(applied))
        if observed is None:
            self._unseen[key] = applied
        owner = owner_key(manifest)
        if owner is not None:
            self._owner[key] = owner
            self._children.setdefault(owner, set()).add(key)
        return applied

    def applied(self, key: ChildKey) -> bool:
        """Whether this process applied the object (the watch may not have shown it yet)."""
        return key in self._applied

    def unseen(self, key: ChildKey) -> dict[str, Any] | None:
        """The object as this process last applied it, while the watch has not shown it yet."""
        return self._unseen.get(key)

    def forget(self, key: ChildKey) -> None:
        """The object is gone (or changed by someone else): the next apply must not be skipped."""
        self._applied.pop(key, None)
        self._unseen.pop(key, None)
        owner = self._owner.pop(key, None)
        if owner is not None:
            siblings = self._children.get(owner, set())
            siblings.discard(key)
            if not siblings:
                self._children.pop(owner, None)

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        """Delete a child that should no longer exist; already gone is fine."""
        self.forget((namespace, kind, name))
        await self._cluster.delete(namespace, kind, name)
        self._on_write(kind, "delete")

    async def write_status(
        self,
        kind: str,
        namespace: str,
        name: str,
        status: dict[str, Any],
        observed: Mapping[str, Any] | None,
        observed_version: str | None,
    ) -> bool:
        """Write `status` through the status subresource unless it is what the object has.

        What the object has is what this operator last wrote, until the watch shows a newer
        version (then the watch is right: someone else may have written). Returns whether it wrote.
        """
        key = (namespace, kind, name)
        written = self._written.get(key)
        fresh = written is not None and _rv(observed_version) <= written.resource_version
        current = written.status if written is not None and fresh else observed
        if current is not None and dict(current) == status:
            return False
        version = await self._cluster.write_status(kind, namespace, name, status)
        self._on_write(kind, "status")
        self._written[key] = _Written(status, _rv(version))
        return True

    async def observe(self, kind: str, name: str, namespace: str = "") -> Seen | None:
        """What the API server has of a child that is not watched (a read); None if it is absent."""
        obj = await self._cluster.get(kind, namespace, name)
        return seen(obj) if obj is not None else None

    def forget_owner(self, namespace: str, kind: str, name: str) -> None:
        """The owner is gone: drop what is remembered about its status and its children."""
        owner = (namespace, kind, name)
        self._written.pop(owner, None)
        for key in list(self._children.get(owner, ())):
            self.forget(key)
