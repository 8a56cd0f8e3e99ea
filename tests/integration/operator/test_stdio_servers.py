"""Hosted stdio servers on the real control plane: children, ownership, status, agents' URLs.

There is no kubelet: `pods_ready` marks the bridge's pod Ready as a kubelet would once the bridge
has a session (tests/integration/runtime/test_bridge.py runs the pod's processes for real, the
e2e tier on the real node).
"""

from __future__ import annotations

from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
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
    pods_ready,
    secret,
    spec,
)

FS = {"stdio": {"command": "node", "args": ["server.js", "stdio"], "image": "example/fs:1"}}
SELECTOR = {"app.kubernetes.io/instance": "ouranos-mcp-fs", "app.kubernetes.io/component": "mcp-server"}


async def _servers_condition(client: AsyncClient, ns: str, expected: tuple[str, str]) -> Any:
    async def check() -> Any:
        obj = await get_object(client, PallasDeployment, ns, "ouranos")
        return obj if condition(obj, "ServersAvailable") == expected else None

    return await eventually(check, 30, f"ServersAvailable={expected}")


async def test_a_stdio_server_is_hosted_and_agents_reach_it_at_its_service(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    kubectl_apply(
        pallas_crds,
        secret("llm", None, in_namespace(namespace)),
        deployment("ouranos", in_namespace(namespace), at("spec.mcpServers.fs", FS)),
        agent("research", in_namespace(namespace), spec(servers=["fs"])),
    )
    unready = await _servers_condition(kube_client, namespace, ("False", "ServersUnavailable"))
    assert unready["status"]["conditions"][0]["type"] == "Ready"
    dep = await get_object(kube_client, Deployment, namespace, "ouranos-mcp-fs")
    svc = await get_object(kube_client, Service, namespace, "ouranos-mcp-fs")
    assert dep is not None
    assert svc is not None
    owners = [(o["kind"], o["name"]) for o in dep["metadata"]["ownerReferences"]]
    assert owners == [("PallasDeployment", "ouranos")]
    containers = {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}
    assert containers["server"]["image"] == "example/fs:1"
    assert containers["server"]["command"][3:] == ["node", "server.js", "stdio"]

    async def config() -> Any:
        cm = await get_object(kube_client, ConfigMap, namespace, "research-config")
        return yaml.safe_load(cm["data"]["agent.yaml"]) if cm is not None else None

    rendered = await eventually(config, 30, "the agent's ConfigMap")
    assert rendered["servers"][0]["url"] == f"http://ouranos-mcp-fs.{namespace}.svc.cluster.local:8000/mcp"

    await pods_ready(kube_client, namespace, SELECTOR)
    await _servers_condition(kube_client, namespace, ("True", "ServersAvailable"))

    # Removing the server from the spec removes what hosted it.
    kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace)))

    async def gone() -> bool:
        left = [
            await get_object(kube_client, kind, namespace, "ouranos-mcp-fs") for kind in (Deployment, Service)
        ]
        return left == [None, None]

    await eventually(gone, 30, "the hosted server's Deployment and Service deleted")


async def test_a_stateful_stdio_server_is_not_hosted_and_its_agents_are_told_why(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    kubectl_apply(
        pallas_crds,
        deployment("ouranos", in_namespace(namespace), at("spec.mcpServers.shell", {**FS, "stateful": True})),
        agent("research", in_namespace(namespace), spec(servers=["shell"])),
    )

    async def refused() -> Any:
        obj = await get_object(kube_client, PallasAgent, namespace, "research")
        return obj if condition(obj, "Accepted") == ("False", "StdioServerNotHostable") else None

    research = await eventually(refused, 30, "Accepted=False, StdioServerNotHostable")
    (accepted,) = [c for c in research["status"]["conditions"] if c["type"] == "Accepted"]
    assert "only `pallas run` hosts" in accepted["message"]
    obj = await _servers_condition(kube_client, namespace, ("False", "ServersUnavailable"))
    (servers,) = [c for c in obj["status"]["conditions"] if c["type"] == "ServersAvailable"]
    assert "shell: stateful stdio servers run only under pallas run" in servers["message"]
    assert await get_object(kube_client, Deployment, namespace, "ouranos-mcp-shell") is None
