"""The `Cluster` port on a lightkube client: the one adapter the running operator uses.

Each request is what the operator made before the port existed; the reads and writes that
need more than one call (Events, pod syncs, ServiceMonitors, bindings, listings, tokens) stay
in their own `k8s` modules, which this delegates to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from pallas_api import names
from pallas_operator.k8s import delegations, events, listing, monitoring, pods, tokens, watches
from pallas_operator.k8s.apply import Seen, child_key
from pallas_operator.k8s.cluster import OwnerEvent, WatchedKind, WatchEvent
from pallas_operator.k8s.delegations import DelegationBinding
from pallas_operator.k8s.resources import CHILD_KINDS, OWNER_KINDS, READ_KINDS

RESOURCES: dict[str, Any] = {**CHILD_KINDS, **OWNER_KINDS, **READ_KINDS}
"""Every kind the operator reads or writes by name, as its lightkube resource class."""


class LightkubeCluster:
    """The API server through one lightkube client (which the caller opens and closes)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply a child as the operator's field manager, forcing."""
        namespace, kind, name = child_key(manifest)
        obj = await self.client.patch(
            CHILD_KINDS[kind], name, dict(manifest), namespace=namespace or None,
            patch_type=PatchType.APPLY, field_manager=names.FIELD_MANAGER, force=True,
        )  # fmt: skip
        applied: dict[str, Any] = obj.to_dict()
        return applied

    async def create_secret(self, manifest: Mapping[str, Any]) -> bool:
        """Create a Secret; a 409 (one of that name exists: kept as it is) is False."""
        try:
            await self.client.create(cast(Secret, Secret.from_dict(dict(manifest))))
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            return False
        return True

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        """Delete a child; a 404 (already gone) is fine."""
        try:
            await self.client.delete(CHILD_KINDS[kind], name, namespace=namespace or None)
        except ApiError as exc:
            if exc.status.code != 404:
                raise

    async def write_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> str | None:
        """Server-side apply the status subresource; the new resourceVersion."""
        body = {
            "apiVersion": names.API_VERSION_STRING,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": dict(status),
        }
        obj = await self.client.patch(
            OWNER_KINDS[kind].Status, name, body, namespace=namespace, patch_type=PatchType.APPLY,
            field_manager=names.FIELD_MANAGER, force=True,
        )  # fmt: skip
        return obj.metadata.resourceVersion if obj.metadata else None

    async def set_finalizers(
        self, kind: str, namespace: str, name: str, finalizers: Sequence[str], resource_version: str
    ) -> bool:
        """A merge patch of `metadata.finalizers`; False on a 409 (the object changed since)."""
        body = {"metadata": {"finalizers": list(finalizers), "resourceVersion": resource_version}}
        try:
            await self.client.patch(
                OWNER_KINDS[kind], name, body, namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as exc:
            if exc.status.code == 409:
                return False
            if exc.status.code == 404:  # gone already: nothing holds it
                return True
            raise
        return True

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object now (a GET); None on a 404."""
        try:
            obj = await self.client.get(RESOURCES[kind], name, namespace=namespace or None)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        found: dict[str, Any] = obj.to_dict()
        return found

    async def owned_service_monitors(self, namespace: str, deployment: str) -> dict[str, Seen] | None:
        """See `k8s.monitoring.owned_service_monitors`."""
        return await monitoring.owned_service_monitors(self.client, namespace, deployment)

    async def delegation_bindings(self, namespaces: Sequence[str]) -> list[DelegationBinding]:
        """See `k8s.delegations.delegation_bindings`."""
        return await delegations.delegation_bindings(self.client, namespaces)

    async def sync_pods(self, namespace: str, labels: Mapping[str, str], config_hash: str) -> int:
        """See `k8s.pods.sync_pods`."""
        return await pods.sync_pods(self.client, namespace, labels, config_hash)

    async def ready_pod_ips(self, namespace: str, labels: Mapping[str, str]) -> list[str]:
        """See `k8s.pods.ready_pod_ips`."""
        return await pods.ready_pod_ips(self.client, namespace, labels)

    async def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Server-side apply `spec.replicas` alone, as the scaling loop's own field manager."""
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        }
        await self.client.patch(
            CHILD_KINDS["Deployment"], name, body, namespace=namespace, patch_type=PatchType.APPLY,
            field_manager=names.SCALING_FIELD_MANAGER, force=True,
        )  # fmt: skip

    async def post_event(self, event: OwnerEvent) -> None:
        """See `k8s.events.post_event`."""
        await events.post_event(self.client, event)

    async def names_of(
        self, kind: str, namespaces: Sequence[str], labels: Mapping[str, str] | None = None
    ) -> list[tuple[str, str]]:
        """See `k8s.listing.names_of`."""
        return await listing.names_of(self.client, RESOURCES[kind], namespaces, labels)

    async def mint_token(
        self, namespace: str, service_account: str, audiences: Sequence[str], seconds: int
    ) -> str:
        """See `k8s.tokens.mint_token`."""
        return await tokens.mint_token(self.client, namespace, service_account, audiences, seconds)

    def watch_objects(self, kind: WatchedKind, namespace: str) -> AsyncIterator[WatchEvent]:
        """See `k8s.watches.watch_objects`."""
        return watches.watch_objects(self.client, kind, namespace)
