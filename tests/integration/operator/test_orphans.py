"""The orphan sweep at start-up: a deployment deleted while no operator ran loses its binding.

The auth-delegator ClusterRoleBinding is cluster-scoped, so no owner reference removes it with
its PallasDeployment; a running operator deletes it when the watch shows the deployment go. An
operator that starts after that lists the bindings labelled as its own and deletes those whose
deployment no longer exists, before it says ready.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from pallas_api import names
from pallas_io.kube import PallasDeployment
from pallas_operator.builders import Owner, auth_delegation_binding
from tests.support.cluster import LocalCluster
from tests.support.operator import (
    agent,
    at,
    deployment,
    eventually,
    get_object,
    in_namespace,
    kubectl_apply,
    running_operator,
    secret,
    spec,
)

KUBERNETES = at("spec.auth.mode", "kubernetes")


def _binding(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The binding exactly as the operator builds it for that deployment."""
    return auth_delegation_binding(Owner(names.DEPLOYMENT_KIND, name, namespace, uid))


async def _uid(client: AsyncClient, name: str) -> str | None:
    obj = await get_object(client, ClusterRoleBinding, "", name)
    return obj["metadata"]["uid"] if obj is not None else None


async def test_a_binding_whose_deployment_is_gone_is_deleted_at_start_and_the_others_are_kept(
    pallas_crds: LocalCluster,
    kube_client: AsyncClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    mod = in_namespace(namespace)
    kubectl_apply(
        pallas_crds, secret("llm", None, mod), deployment("kept", mod, at("spec.auth.mode", "kubernetes"))
    )
    kept = await get_object(kube_client, PallasDeployment, namespace, "kept")
    assert kept is not None
    unwatched = f"{namespace}-elsewhere"  # a namespace this operator does not watch: not its to judge
    bindings = {
        "kept": _binding(namespace, "kept", kept["metadata"]["uid"]),
        "orphan": _binding(namespace, "gone", "uid-of-a-deployment-deleted-while-no-operator-ran"),
        "unwatched": _binding(unwatched, "gone", "uid-elsewhere"),
    }
    names_ = {role: b["metadata"]["name"] for role, b in bindings.items()}
    try:
        kubectl_apply(pallas_crds, *bindings.values())
        before = {role: await _uid(kube_client, name) for role, name in names_.items()}
        assert all(before.values()), before

        # Ready only once the sweep ran, and before any reconcile could re-create what it deleted.
        async with running_operator(pallas_crds, namespace):
            assert await _uid(kube_client, names_["orphan"]) is None, "the orphaned binding is deleted"
            assert await _uid(kube_client, names_["kept"]) == before["kept"], "kept, never re-created"
            assert await _uid(kube_client, names_["unwatched"]) == before["unwatched"]
    finally:  # cluster-scoped: the namespace's deletion would not take them along
        for name in names_.values():
            pallas_crds.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")


async def test_a_deployment_gone_before_this_process_knew_its_binding_still_loses_it(
    pallas_crds: LocalCluster,
    kube_client: AsyncClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    mod = in_namespace(namespace)
    orphan = _binding(namespace, "gone", "uid-of-a-deployment-this-process-never-saw")
    name = orphan["metadata"]["name"]
    try:
        async with running_operator(pallas_crds, namespace):
            kubectl_apply(pallas_crds, orphan)  # past the sweep: as if a predecessor had applied it
            # An agent naming the deployment reconciles it; it is not there, so its binding goes,
            # although this process never applied or read that binding.
            kubectl_apply(pallas_crds, agent("research", mod, spec(deployment="gone")))

            async def unbound() -> bool:
                return await _uid(kube_client, name) is None

            await eventually(unbound, 30, "the binding of a deployment that does not exist deleted")
    finally:
        pallas_crds.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")
