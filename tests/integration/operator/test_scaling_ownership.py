"""Who owns a scaled agent's `replicas`, on the real API server (server-side apply's merge).

The reconcile applies the agent's Deployment without `replicas` under scaling, and the scaling
loop sets them under its own field manager (`LightkubeCluster.scale`). What that relies on: a
field an applier stops setting is removed (back to the default, 1) unless another manager owns
it too, in which case it stays. Pods are not run in these namespaces (`NO_NODE`).
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment

from pallas_api import names
from pallas_operator.k8s.lightkube_cluster import LightkubeCluster


def deployment(namespace: str, replicas: int | None) -> dict[str, Any]:
    labels = {"app": "scaled"}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/none:1"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    meta = {"name": "scaled", "namespace": namespace}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


async def replicas(kube: AsyncClient, namespace: str) -> tuple[int, set[str]]:
    """The Deployment's replicas and the managers that own them."""
    obj = (await kube.get(Deployment, "scaled", namespace=namespace)).to_dict()
    owners = {
        str(m["manager"])
        for m in obj["metadata"].get("managedFields") or []
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    }
    return int(obj["spec"]["replicas"]), owners


async def test_replicas_the_loop_owns_stay_when_the_apply_leaves_them_out(
    kube_client: AsyncClient, namespace: str
) -> None:
    cluster = LightkubeCluster(kube_client)
    await cluster.apply(deployment(namespace, 3))  # a fixed size, the operator's manager
    await cluster.scale(namespace, "scaled", 3)  # handed over: the loop's manager too
    assert await replicas(kube_client, namespace) == (3, {names.FIELD_MANAGER, names.SCALING_FIELD_MANAGER})

    await cluster.apply(deployment(namespace, None))  # now scaled: no replicas in the apply
    assert await replicas(kube_client, namespace) == (3, {names.SCALING_FIELD_MANAGER})

    await cluster.scale(namespace, "scaled", 2)  # the loop's change...
    await cluster.apply(deployment(namespace, None))  # ...survives the next apply
    assert (await replicas(kube_client, namespace))[0] == 2


async def test_without_the_hand_over_the_apply_leaving_replicas_out_resets_them_to_1(
    kube_client: AsyncClient, namespace: str
) -> None:
    """Why the reconcile hands the field over first (reconcile/scaling.py)."""
    cluster = LightkubeCluster(kube_client)
    await cluster.apply(deployment(namespace, 3))

    await cluster.apply(deployment(namespace, None))

    assert await replicas(kube_client, namespace) == (1, set())


async def test_back_to_a_fixed_size_the_apply_takes_replicas_again(
    kube_client: AsyncClient, namespace: str
) -> None:
    cluster = LightkubeCluster(kube_client)
    await cluster.apply(deployment(namespace, None))
    await cluster.scale(namespace, "scaled", 4)

    await cluster.apply(deployment(namespace, 2))  # forced: the field is the operator's

    assert await replicas(kube_client, namespace) == (2, {names.FIELD_MANAGER})
