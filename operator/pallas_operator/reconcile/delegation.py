"""The cluster-scoped auth-delegator binding of a deployment's agents (`auth.mode: kubernetes`).

No owner reference removes a cluster-scoped object with its namespaced owner, and only a few
exist, so it is not watched: `op.delegations` remembers whether it exists, what is not known is
read once, and a deployment's deletion deletes it here (a deployment deleted while no operator ran
is the orphan sweep's, `reconcile.orphans`).
"""

from __future__ import annotations

from pallas_api import names
from pallas_operator.builders import Owner, auth_delegation_binding
from pallas_operator.engine.context import Operator


async def sync_delegation(op: Operator, owner: Owner, *, wanted: bool) -> None:
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


async def unbind(op: Operator, namespace: str, name: str) -> None:
    """Delete a deleted deployment's auth-delegator binding, if it has one.

    Cluster-scoped, so no owner reference removes it with the deployment. When this process does
    not know it (the deployment went before its first reconcile here), it is read (a GET). One
    of a deployment deleted while no operator ran is the orphan sweep's (`reconcile.orphans`).
    """
    await _delete_binding(op, namespace, name, exists=op.delegations.forget(namespace, name))
