"""The `Cluster` port: every request the operator's engine and reconciles make to the API server.

The reconciles decide from `engine.world` (what the watches showed) and write through this one
seam, so they run the same on the lightkube adapter (`k8s.lightkube_cluster`) and on an
in-memory one in the unit tests. What stays above it, in `k8s.apply`, is the
policy of when a write is needed at all (skipping no-op applies and status writes). Kinds are
named by their `kind` string: the adapter maps them to resource classes, so this module needs
no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from pallas_operator.k8s.apply import Seen
    from pallas_operator.k8s.delegations import DelegationBinding


@dataclass(frozen=True, slots=True)
class OwnerEvent:
    """An Event about a PallasAgent, PallasDeployment or PallasTrigger (what `kubectl describe` shows)."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    warning: bool = True


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """A kind an event trigger watches: its group ("" for core), version, kind and resource."""

    group: str
    version: str
    kind: str
    plural: str


WatchType = Literal["LISTED", "ADDED", "MODIFIED", "DELETED"]
"""`LISTED`: the object was there when the watch (re)started (its initial list), not a change."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: its type and the object as it is now (as it was, for DELETED)."""

    type: WatchType
    object: dict[str, Any]


class Cluster(Protocol):
    """The API server as the operator uses it. Namespaces are "" for cluster-scoped objects."""

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply `manifest` (a child kind) as the operator's field manager, forcing.

        Returns:
            The object as stored, managedFields included.
        """
        ...

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        """Delete a child; one already gone is fine."""
        ...

    async def create_secret(self, manifest: Mapping[str, Any]) -> bool:
        """Create the Secret `manifest` unless one of its name exists (never read, never replaced).

        Returns:
            Whether it was created now.
        """
        ...

    async def write_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> str | None:
        """Server-side apply the status subresource of a PallasAgent or PallasDeployment.

        Returns:
            The resourceVersion the write produced (None if the answer carried none).
        """
        ...

    async def set_finalizers(
        self, kind: str, namespace: str, name: str, finalizers: Sequence[str], resource_version: str
    ) -> bool:
        """Replace the finalizers of a PallasAgent or PallasDeployment seen at `resource_version`.

        Returns:
            False when the object changed since (a conflict: nothing was written; the caller
            looks again once the watch shows the change).
        """
        ...

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the API server has it now (a GET, past any watch lag); None if absent."""
        ...

    async def owned_service_monitors(self, namespace: str, deployment: str) -> dict[str, Seen] | None:
        """The deployment's ServiceMonitors by name; None when their CRD is not installed."""
        ...

    async def delegation_bindings(self, namespaces: Sequence[str]) -> list[DelegationBinding]:
        """The operator's auth-delegator bindings for deployments in `namespaces` (empty: all)."""
        ...

    async def sync_pods(self, namespace: str, labels: Mapping[str, str], config_hash: str) -> int:
        """Annotate each live pod matching `labels` with `config_hash` (best effort); how many."""
        ...

    async def ready_pod_ips(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        """The IPs of the pods matching `labels` that are Ready and not stopping (the scaling loop's)."""
        ...

    async def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set a Deployment's `spec.replicas`, server-side applied as `SCALING_FIELD_MANAGER`, forcing.

        The scaling loop's one write; its own manager keeps the field when the reconcile's apply
        (the operator's manager) leaves it out.
        """
        ...

    async def post_event(self, event: OwnerEvent) -> None:
        """Post one Event about a PallasAgent or PallasDeployment; best effort."""
        ...

    async def names_of(
        self, kind: str, namespaces: Sequence[str], labels: Mapping[str, str] | None = None
    ) -> list[tuple[str, str]]:
        """(namespace, name) of every object of `kind` matching `labels` ("*": every namespace)."""
        ...

    async def mint_token(
        self, namespace: str, service_account: str, audiences: Sequence[str], seconds: int
    ) -> str:
        """A new token of the ServiceAccount for `audiences`, valid `seconds`.

        Raises:
            TokenUnavailable: The TokenRequest was refused or returned no token.
        """
        ...

    def watch_objects(self, kind: WatchedKind, namespace: str) -> AsyncIterator[WatchEvent]:
        """Every object of `kind` in `namespace` ("*": all) as `LISTED`, then its changes, forever.

        After a gap (the watch expired, the connection failed) the objects are listed again as
        `LISTED`: changes made during a gap are not replayed. Ends only when the caller stops
        iterating (cancels).
        """
        ...
