"""The orphan sweep at start-up: cluster-scoped children whose PallasDeployment is gone.

Namespaced children go with their owner (owner references and the garbage collector). A
deployment's auth-delegator ClusterRoleBinding cannot have a namespaced owner: the deployment's
reconcile deletes it when the watch shows the deployment deleted, which an operator that was not
running at the time never sees. So at every start, once the world holds every object that
existed and before the work queue starts (nothing is applied meanwhile), the bindings labelled
as ours in the watched namespaces are listed, and each whose deployment is neither in the world
nor on the API server (the watch may lag behind one created a moment ago, by another operator
watching the same namespace) is deleted.
"""

from __future__ import annotations

import logging

from pallas_api import names
from pallas_operator.engine.context import Operator

log = logging.getLogger(__name__)


async def sweep_orphans(op: Operator) -> list[str]:
    """Delete the auth-delegator bindings whose PallasDeployment no longer exists; their names.

    A failure is logged and ends the sweep (start-up goes on; the next start sweeps again).
    """
    swept: list[str] = []
    try:
        for binding in await op.cluster.delegation_bindings(op.settings.namespaces):
            namespace, deployment = binding.namespace, binding.deployment
            if op.world.deployment(namespace, deployment) is not None:
                continue
            if await op.cluster.get(names.DEPLOYMENT_KIND, namespace, deployment) is not None:
                continue
            await op.applier.delete("", "ClusterRoleBinding", binding.name)
            log.info(
                "deleted ClusterRoleBinding %s: its PallasDeployment %s/%s no longer exists",
                binding.name, namespace, deployment,
            )  # fmt: skip
            swept.append(binding.name)
    except Exception as exc:  # noqa: BLE001 - a cleanup must not keep the operator from starting
        log.warning("the sweep of orphaned ClusterRoleBindings did not finish: %s", exc)
    return swept
