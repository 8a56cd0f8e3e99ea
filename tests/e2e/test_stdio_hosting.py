"""A stdio MCP server hosted by the operator on the real node, and an agent calling its tools.

The server is server-everything over stdio in an image built here from the MCP peers cache
(`hack/build/image stdio-everything`: Node 22 and the package on the project's Debian base,
nothing pulled). The operator runs it beside `pallas bridge` in a pod of its own; the agent, in
its own pod, reaches it at the Service URL like any other server. Killing the server's process
gets its container restarted by the kubelet, and the next call works again.

Run alone (it starts the real node): `flock /work/node.lock .venv/bin/pytest tests/e2e/test_stdio_hosting.py`.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from lightkube import Client as KubeClient
from lightkube.resources.core_v1 import Pod, Secret

from pallas_api import names
from pallas_io.kube import PallasAgent, PallasDeployment
from tests.support.cluster import LocalCluster
from tests.support.e2e import (
    HACK_IMAGE,
    LocalNode,
    LoopThread,
    OperatorRelease,
    create_namespace,
    delete_namespace,
    install_operator,
    local_node,
    quiet_deployment,
    until,
)
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import McpPeers
from tests.support.mcp_servers import INITIALIZE
from tests.support.operator import condition, kubectl_apply

MODEL = "fake-model"
DEPLOYMENT = "stdio"
AGENT = "toolsmith"
SERVER = "everything"
SERVER_ENTRY = "/opt/server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
READY_WITHIN = 120
RESTART_WITHIN = 90


def decide(body: dict[str, Any]) -> Text | ToolCalls:
    """Echo through the stdio server, then report what came back."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Text(f"the server said: {last['content']}")
    return ToolCalls([Call(f"{SERVER}__echo", {"message": last["content"]})])


@dataclass
class Hosting:
    cluster: LocalCluster
    namespace: str
    node: LocalNode
    kube: KubeClient
    llm: FakeOpenAI

    def agent_url(self) -> str:
        return f"http://{AGENT}.{self.namespace}.svc.cluster.local:8000/mcp"

    def server_pod(self) -> Pod | None:
        pods = list(
            self.kube.list(
                Pod,
                namespace=self.namespace,
                labels={"app.kubernetes.io/instance": f"{DEPLOYMENT}-mcp-{SERVER}"},
            )
        )
        live = [p for p in pods if p.metadata is not None and p.metadata.deletionTimestamp is None]
        return live[0] if len(live) == 1 else None

    def server_container(self) -> tuple[str, int, bool] | None:
        """The server container's id, restart count, and whether the pod is Ready."""
        pod = self.server_pod()
        if pod is None or pod.status is None:
            return None
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        for status in pod.status.containerStatuses or []:
            if status.name == "server" and status.containerID:
                return status.containerID, status.restartCount, ready
        return None

    def deployment_condition(self, type_: str) -> tuple[str, str] | None:
        return condition(
            self.kube.get(PallasDeployment, DEPLOYMENT, namespace=self.namespace).to_dict(), type_
        )

    def agent_ready(self) -> bool:
        obj = self.kube.get(PallasAgent, AGENT, namespace=self.namespace).to_dict()
        return condition(obj, "Ready") == ("True", "AgentReady")

    def diagnose(self) -> str:
        return self.cluster.kubectl(
            "get", "pods,pallasagents,pallasdeployments", "-n", self.namespace, "-o", "wide", check=False
        ).stdout


def manifests(namespace: str, node: LocalNode, image: str, llm: FakeOpenAI) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    mcp_servers = {
        SERVER: {
            "stdio": {
                "command": "node",
                "args": [SERVER_ENTRY, "stdio"],
                "image": image,
                "env": [{"name": "HOME", "value": "/tmp"}],
            },
            "timeoutSeconds": 20,
        }
    }
    return [
        *quiet_deployment(namespace, DEPLOYMENT, llm.base_url, MODEL, mcpServers=mcp_servers),
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": AGENT, **meta},
            "spec": {
                "deployment": DEPLOYMENT,
                "instruction": "Use the everything server.",
                "servers": [SERVER],
                "pod": {"nodeSelector": {"kubernetes.io/hostname": node.name}},
            },
        },
    ]


def stdio_image(peers: McpPeers) -> str:
    res = subprocess.run(
        [str(HACK_IMAGE), "stdio-everything", str(peers.dir)], capture_output=True, text=True, timeout=1800
    )
    if res.returncode != 0:
        pytest.fail(f"hack/build/image stdio-everything failed:\n{res.stderr[-3000:]}", pytrace=False)
    return res.stdout.strip()


@pytest.fixture(scope="module")
def hosting(pallas_crds: LocalCluster, mcp_peers: McpPeers) -> Iterator[Hosting]:
    node = local_node()
    image = stdio_image(mcp_peers)
    namespace = f"t-e2e-stdio-{secrets.token_hex(3)}"
    create_namespace(pallas_crds, namespace)
    loop = LoopThread()
    operator: OperatorRelease | None = None
    kube = KubeClient(config=pallas_crds.config(), field_manager="pallas-tests")
    try:
        llm = loop.enter(FakeOpenAI(default=decide, models=[MODEL], host=node.ip))
        operator = install_operator(pallas_crds, namespace, node.image)
        kubectl_apply(pallas_crds, *manifests(namespace, node, image, llm))
        yield Hosting(pallas_crds, namespace, node, kube, llm)
    finally:
        kube.close()
        if operator is not None:
            operator.uninstall()
        delete_namespace(pallas_crds, namespace)
        loop.close()


async def ask(hosting: Hosting, message: str) -> str:
    async with Client(hosting.agent_url(), timeout=60) as client:
        result = await client.call_tool("send_message", {"message": message})
    return str(result.content[0].text)


async def servers_available(hosting: Hosting) -> None:
    await until(
        "the stdio server's bridge Ready (ServersAvailable)",
        lambda: hosting.deployment_condition("ServersAvailable") == ("True", "ServersAvailable"),
        READY_WITHIN,
        diagnose=hosting.diagnose,
    )


async def test_an_agent_calls_a_hosted_stdio_server_which_survives_a_crash(hosting: Hosting) -> None:
    await servers_available(hosting)
    await until("the agent Ready", hosting.agent_ready, READY_WITHIN, diagnose=hosting.diagnose)
    assert await ask(hosting, "hello from the cluster") == "the server said: Echo: hello from the cluster"

    before = hosting.server_container()
    assert before is not None
    container, restarts, _ = before
    os.kill(hosting.node.container_pid(container), signal.SIGKILL)

    def restarted() -> bool:
        now = hosting.server_container()
        return now is not None and now[1] > restarts and now[2]

    await until(
        "the server's container restarted and the pod Ready again",
        restarted,
        RESTART_WITHIN,
        diagnose=hosting.diagnose,
    )
    assert await ask(hosting, "after the crash") == "the server said: Echo: after the crash"

    pod = hosting.server_pod()
    assert pod is not None
    assert pod.metadata is not None
    logs = hosting.cluster.kubectl(
        "logs", "-n", hosting.namespace, pod.metadata.name or "", "-c", "server", "--previous", check=False
    )
    assert "Starting default (STDIO) server" in logs.stdout  # the server's stderr, its container's log
    bridge = hosting.cluster.kubectl(
        "logs", "-n", hosting.namespace, pod.metadata.name or "", "-c", "bridge"
    ).stdout
    assert f"{SERVER}: lost" in bridge


async def test_the_bridge_refuses_a_caller_without_the_deployments_credential(hosting: Hosting) -> None:
    """Issue 46: the bridge Service answers the deployment's agents only (they send the credential)."""
    await servers_available(hosting)
    bridge = f"http://{DEPLOYMENT}-mcp-{SERVER}.{hosting.namespace}.svc.cluster.local:8000"
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as http:
        without = await http.post(f"{bridge}/mcp", json=INITIALIZE, headers=accept)
        wrong = await http.post(
            f"{bridge}/mcp", json=INITIALIZE, headers={**accept, names.BRIDGE_TOKEN_HEADER: "guess"}
        )
        probe = await http.get(f"{bridge}/healthz")
    assert (without.status_code, wrong.status_code, probe.status_code) == (401, 401, 200)
    assert without.json()["error"] == "unauthorized"
    # The credential is the operator's Secret, made once; the agent (which sends it) still works.
    secret = hosting.kube.get(Secret, names.bridge_token_secret_name(DEPLOYMENT), namespace=hosting.namespace)
    assert secret.metadata is not None
    assert secret.metadata.ownerReferences
    assert await ask(hosting, "with the credential") == "the server said: Echo: with the credential"
