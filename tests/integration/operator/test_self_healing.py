"""Self-healing and lifecycle: drift repair, garbage collection, live edits, restarts, idling."""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import ConfigMap, Service

from pallas_io.kube import PallasAgent, PallasDeployment
from tests.support.cluster import LocalCluster
from tests.support.operator import (
    RunningOperator,
    agent,
    at,
    condition,
    deployment,
    eventually,
    get_object,
    in_namespace,
    kubectl_apply,
    quiet,
    resource_versions,
    running_operator,
    secret,
    spec,
    total,
)

OUR_RESOURCES = (PallasAgent, PallasDeployment, ConfigMap, Deployment, Service)
SETTLED_AFTER = 1.5
"""Seconds without a write after which the operator's first rounds (and their echoes) are over."""
IDLE_WINDOW = 6.0
"""Seconds an idle operator is watched: probes, rechecks and watch restarts come and go in it,
and none may write."""


def _setup(cluster: LocalCluster, ns: str, *agents: str) -> None:
    mod = in_namespace(ns)
    kubectl_apply(
        cluster, secret("llm", None, mod), deployment("ouranos", mod), *(agent(name, mod) for name in agents)
    )


async def _exists(client: AsyncClient, resource: Any, ns: str, name: str) -> dict[str, Any]:
    async def check() -> Any:
        return await get_object(client, resource, ns, name)

    found: dict[str, Any] = await eventually(check, 30, f"{resource.__name__} {name}")
    return found


async def test_children_deleted_or_edited_by_hand_are_restored(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    _setup(pallas_crds, namespace, "research")
    original = await _exists(kube_client, Service, namespace, "research")
    await _exists(kube_client, Deployment, namespace, "research")
    await _exists(kube_client, ConfigMap, namespace, "research-config")

    pallas_crds.kubectl("delete", "service", "research", "-n", namespace)
    restored = await _exists(kube_client, Service, namespace, "research")
    assert restored["metadata"]["uid"] != original["metadata"]["uid"]

    pallas_crds.kubectl("scale", "deployment", "research", "--replicas=3", "-n", namespace)
    pallas_crds.kubectl(
        "patch",
        "configmap",
        "research-config",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"data":{"agent.yaml":"x"}}',
    )

    async def repaired() -> bool:
        dep = await get_object(kube_client, Deployment, namespace, "research")
        cm = await get_object(kube_client, ConfigMap, namespace, "research-config")
        return bool(
            dep and cm and dep["spec"]["replicas"] == 1 and cm["data"]["agent.yaml"].startswith("name:")
        )

    await eventually(repaired, 10, "replicas and config restored")


async def test_deleting_an_agent_garbage_collects_its_children(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    _setup(pallas_crds, namespace, "research")
    await _exists(kube_client, Deployment, namespace, "research")
    pallas_crds.kubectl("delete", "pallasagent", "research", "-n", namespace)

    async def gone() -> bool:
        children = ((Deployment, "research"), (Service, "research"), (ConfigMap, "research-config"))
        left = [await get_object(kube_client, kind, namespace, name) for kind, name in children]
        return not any(left)

    await eventually(gone, 90, "garbage collection of the agent's children")


async def test_a_secret_rotation_and_a_live_edit_update_the_config_map_and_leave_the_pods(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    _setup(pallas_crds, namespace, "research")
    first = await _exists(kube_client, Deployment, namespace, "research")

    async def config_text() -> str:
        config_map = await _exists(kube_client, ConfigMap, namespace, "research-config")
        return str(config_map["data"]["agent.yaml"])

    before = await config_text()
    # A rotation: the pods read the key from their Secret volume at each turn, so nothing of the
    # operator's changes (it does not even see the Secret).
    kubectl_apply(pallas_crds, secret("llm", {"VLLM_KEY": "sk-rotated"}, in_namespace(namespace)))
    # A live edit: the ConfigMap changes, the pod template does not.
    kubectl_apply(pallas_crds, agent("research", in_namespace(namespace), spec(instruction="Be brief.")))

    async def edited() -> Any:
        text = await config_text()
        return text if "Be brief." in text else None

    after = await eventually(edited, 15, "the instruction edit in the ConfigMap")
    assert after != before
    assert "sk-rotated" not in after
    now = await _exists(kube_client, Deployment, namespace, "research")
    assert now["spec"]["template"] == first["spec"]["template"], "no pod rolls for a live edit"
    assert now["metadata"]["generation"] == first["metadata"]["generation"], "the Deployment was not written"

    # What needs a new process rolls the pods: here the image.
    edit = deployment(
        "ouranos", in_namespace(namespace), at("spec.runtime.image", "registry.example/pallas:9")
    )
    kubectl_apply(pallas_crds, edit)

    async def rolled() -> Any:
        dep = await _exists(kube_client, Deployment, namespace, "research")
        image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
        return dep if image == "registry.example/pallas:9" else None

    await eventually(rolled, 15, "a new pod template for the image edit")


async def test_a_restart_mid_reconcile_converges_without_duplicates(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    names = [f"agent-{i}" for i in range(12)]
    async with running_operator(pallas_crds, namespace):
        _setup(pallas_crds, namespace, *names)
        await _exists(kube_client, Deployment, namespace, names[0])
    # Stopped while the others were still in flight; a fresh operator takes over.
    async with running_operator(pallas_crds, namespace):

        async def converged() -> bool:
            statuses = [await get_object(kube_client, PallasAgent, namespace, n) for n in names]
            return all(condition(s, "Accepted") == ("True", "Accepted") for s in statuses)

        await eventually(converged, 60, "every agent accepted")
        deployments = [d.metadata.name async for d in kube_client.list(Deployment, namespace=namespace)]
        assert sorted(d for d in deployments if d.startswith("agent-")) == sorted(names)

        # The Deployment controller makes one ReplicaSet per Deployment: no duplicate Deployment
        # (or a rewritten template) would show as a second ReplicaSet of one owner.
        async def owners() -> list[str] | None:
            replicasets = [rs async for rs in kube_client.list(ReplicaSet, namespace=namespace)]
            found = [r.metadata.ownerReferences[0].name for r in replicasets if r.metadata.ownerReferences]
            ours = sorted(o for o in found if o.startswith("agent-"))
            return ours if len(ours) >= len(names) else None

        assert await eventually(owners, 30, "a ReplicaSet for every agent") == sorted(names)


async def test_an_idle_operator_writes_nothing(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    _setup(pallas_crds, namespace, "research", "helper")
    for name in ("research", "helper"):
        await _exists(kube_client, Deployment, namespace, name)

    await quiet(pallas_operator, ("pallas_operator_api_writes_total",), SETTLED_AFTER, within=30)

    # The controllers' echoes too (the Deployment controller writes the registry Deployment's
    # status a moment after it appears): the window starts once nobody writes our objects.
    async def objects_settled() -> dict[tuple[str, str], str] | None:
        before = await resource_versions(kube_client, namespace, *OUR_RESOURCES)
        await asyncio.sleep(SETTLED_AFTER)
        return before if await resource_versions(kube_client, namespace, *OUR_RESOURCES) == before else None

    versions = await eventually(objects_settled, 30, "our objects settling")
    ours_before = total(pallas_operator.runner.metrics, "pallas_operator_api_writes_total")
    await asyncio.sleep(IDLE_WINDOW)
    assert total(pallas_operator.runner.metrics, "pallas_operator_api_writes_total") == ours_before
    assert await resource_versions(kube_client, namespace, *OUR_RESOURCES) == versions
