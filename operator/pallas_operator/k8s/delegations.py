"""Which auth-delegator ClusterRoleBindings exist, and whose each is by its labels.

They are cluster-scoped, so no owner reference ties one to its PallasDeployment; their
`pallas.dev/namespace` and `pallas.dev/deployment` labels say whose it is. Listed once per
start-up (the orphan sweep), selected by those labels on the API server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient, operators
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from pallas_api import names


@dataclass(frozen=True, slots=True)
class DelegationBinding:
    """An auth-delegator ClusterRoleBinding and the PallasDeployment its labels name."""

    name: str
    namespace: str
    deployment: str


async def delegation_bindings(client: AsyncClient, namespaces: Sequence[str]) -> list[DelegationBinding]:
    """The operator's ClusterRoleBindings for deployments in `namespaces` (empty: every namespace)."""
    selector: dict[str, Any] = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_NAMESPACE: operators.in_(namespaces) if namespaces else operators.exists(),
        names.LABEL_DEPLOYMENT: operators.exists(),
    }
    found: list[DelegationBinding] = []
    async for binding in client.list(ClusterRoleBinding, labels=selector, chunk_size=500):
        meta = binding.metadata
        if meta is None or not meta.name:
            continue
        labels = meta.labels or {}
        found.append(
            DelegationBinding(meta.name, labels[names.LABEL_NAMESPACE], labels[names.LABEL_DEPLOYMENT])
        )
    return found
