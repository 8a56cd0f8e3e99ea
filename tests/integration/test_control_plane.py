"""Smoke tests proving the local control plane is real Kubernetes, not a mock.

Each test exercises a component the later tests rely on: the API server's version and CRD
machinery, the controller-manager's deployment and garbage-collector controllers, and a kopf
operator watching through it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from typing import Any

import kopf
import pytest
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta, OwnerReference
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import ConfigMap

from tests.support.cluster import LocalCluster
from tests.support.waiting import until


async def eventually(check: Callable[[], Any], within: float, what: str) -> Any:
    """Poll an async check until it returns something truthy; fail naming what never happened."""
    return await until(what, check, within, interval=0.2)


def crd_manifest(group: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "model": {"type": "string"},
                                        "replicas": {"type": "integer", "minimum": 0},
                                    },
                                },
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def smoke_crd(kube_cluster: LocalCluster) -> Any:
    """A throw-away CRD with a unique group, so tests never share cluster-scoped state."""
    group = f"s{secrets.token_hex(4)}.smoke.pallas.dev"
    manifest = crd_manifest(group, "Widget", "widgets")
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    name = manifest["metadata"]["name"]
    kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    yield create_namespaced_resource(group, "v1", "Widget", "widgets")
    kube_cluster.kubectl("delete", "crd", name, "--wait=false")


def test_kubectl_reports_a_v1_34_server(kube_cluster: LocalCluster) -> None:
    version = json.loads(kube_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.34."), version
    assert version["clientVersion"]["gitVersion"].startswith("v1.34."), version


def test_crd_becomes_established_and_a_custom_object_round_trips(
    kube_cluster: LocalCluster, namespace: str, smoke_crd: Any
) -> None:
    group = smoke_crd._api_info.resource.group
    obj = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"model": "vllm.qwen3-8b", "replicas": 2},
    }
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    got = json.loads(
        kube_cluster.kubectl("get", f"widgets.{group}", "w1", "-n", namespace, "-o", "json").stdout
    )
    assert got["spec"] == obj["spec"]
    assert got["metadata"]["uid"]

    # The schema is enforced by the API server: a negative replica count is rejected.
    bad = {**obj, "metadata": {"name": "w2", "namespace": namespace}, "spec": {"replicas": -1}}
    res = kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert res.returncode != 0
    assert "spec.replicas" in res.stderr


async def test_deployment_gets_a_replicaset_from_the_controller_manager(
    kube_client: AsyncClient, namespace: str
) -> None:
    labels = {"app": "smoke"}
    deployment = Deployment(
        metadata=ObjectMeta(name="smoke", namespace=namespace),
        spec=DeploymentSpec(
            replicas=1,
            selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=labels),
                spec=PodSpec(containers=[Container(name="main", image="registry.invalid/none:1")]),
            ),
        ),
    )
    created = await kube_client.create(deployment)

    async def owned_replicasets() -> list[ReplicaSet]:
        return [
            rs
            async for rs in kube_client.list(ReplicaSet, namespace=namespace)
            if any(ref.uid == created.metadata.uid for ref in rs.metadata.ownerReferences or [])
        ]

    replicasets = await eventually(owned_replicasets, 30, "a ReplicaSet owned by the Deployment")
    assert replicasets[0].spec.replicas == 1


async def test_deleting_an_owner_garbage_collects_the_owned_configmap(
    kube_client: AsyncClient, namespace: str
) -> None:
    owner = await kube_client.create(ConfigMap(metadata=ObjectMeta(name="owner", namespace=namespace)))
    ref = OwnerReference(
        apiVersion="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, blockOwnerDeletion=True
    )
    await kube_client.create(
        ConfigMap(metadata=ObjectMeta(name="child", namespace=namespace, ownerReferences=[ref]))
    )
    await kube_client.delete(ConfigMap, "owner", namespace=namespace)

    async def child_gone() -> bool:
        names = [cm.metadata.name async for cm in kube_client.list(ConfigMap, namespace=namespace)]
        return "child" not in names

    await eventually(child_gone, 60, "garbage collection of the owned ConfigMap")


async def test_a_kopf_operator_sees_a_created_object(
    kube_cluster: LocalCluster,
    namespace: str,
    smoke_crd: Any,
    kube_client: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = smoke_crd._api_info.resource.group
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    registry = kopf.OperatorRegistry()
    seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.create(group, "v1", "widgets", registry=registry, id="record")
    async def record(name: str, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
        patch.status["seenModel"] = spec["model"]
        await seen.put((name, spec["model"]))

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            settings=settings,
            namespaces=[namespace],
            standalone=True,
            stop_flag=stop,
            ready_flag=ready,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        await kube_client.create(
            smoke_crd(metadata=ObjectMeta(name="seen-by-kopf", namespace=namespace), spec={"model": "m1"})
        )
        assert await asyncio.wait_for(seen.get(), 30) == ("seen-by-kopf", "m1")

        async def status_written() -> bool:
            obj = await kube_client.get(smoke_crd, "seen-by-kopf", namespace=namespace)
            return (obj.status or {}).get("seenModel") == "m1"

        await eventually(status_written, 30, "kopf writing the status subresource")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
