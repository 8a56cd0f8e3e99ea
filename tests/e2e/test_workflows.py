"""A chain and a router as containers on the real node: workflow agents reaching their steps' pods.

Three step agents and two workflow agents (`chain` over researcher → writer, `router` over
researcher and writer) run as pods of the operator, one scripted FakeOpenAI on the node's
address thinking for all of them (its reply depends on the agent's instruction). The workflow
agents wait for their steps (implied dependencies), show their shape in `kubectl get pa -o wide`
and answer through the steps' Services.

Run alone (it starts the real node): `flock /work/node.lock .venv/bin/pytest tests/e2e/test_workflows.py`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastmcp import Client
from lightkube import Client as KubeClient

from pallas_io.kube import PallasAgent
from tests.support.cluster import LocalCluster
from tests.support.e2e import (
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
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.operator import condition, kubectl_apply

MODEL = "fake-model"
DEPLOYMENT = "newsroom"
STEPS = ["researcher", "writer"]
WORKFLOWS: dict[str, dict[str, Any]] = {
    "article": {"chain": {"steps": ["researcher", "writer"]}},
    "desk": {"router": {"routes": ["researcher", "writer"]}},
}
READY_WITHIN = 180


def decide(body: dict[str, Any]) -> Text:
    """Steps echo their message; the router sends poems to the writer and the rest to the researcher."""
    agent, said = body["messages"][0]["content"], body["messages"][-1]["content"]
    if agent.startswith("desk"):
        return Text(json.dumps({"route": "writer" if "poem" in said else "researcher"}))
    return Text(f"{agent}: {said}")


@dataclass
class Newsroom:
    cluster: LocalCluster
    namespace: str
    kube: KubeClient
    llm: FakeOpenAI

    def url(self, agent: str) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/mcp"

    def ready(self, agent: str) -> bool:
        obj = self.kube.get(PallasAgent, agent, namespace=self.namespace).to_dict()
        return condition(obj, "Ready") == ("True", "AgentReady")

    def diagnose(self) -> str:
        return self.cluster.kubectl(
            "get", "pods,pallasagents,pallasdeployments", "-n", self.namespace, "-o", "wide", check=False
        ).stdout


def manifests(namespace: str, node: LocalNode, llm: FakeOpenAI) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    docs = quiet_deployment(namespace, DEPLOYMENT, llm.base_url, MODEL)
    for name in [*WORKFLOWS, *STEPS]:  # workflows first: the operator must hold them for their steps
        spec: dict[str, Any] = {
            "deployment": DEPLOYMENT,
            "instruction": name,
            "description": f"the {name}",
            "pod": {"nodeSelector": {"kubernetes.io/hostname": node.name}},
        }
        if name in WORKFLOWS:
            spec["workflow"] = WORKFLOWS[name]
        docs.append(
            {
                "apiVersion": "pallas.dev/v1alpha1",
                "kind": "PallasAgent",
                "metadata": {"name": name, **meta},
                "spec": spec,
            }
        )
    return docs


@pytest.fixture(scope="module")
def newsroom(pallas_crds: LocalCluster) -> Iterator[Newsroom]:
    node = local_node()
    namespace = f"t-e2e-workflows-{secrets.token_hex(3)}"
    create_namespace(pallas_crds, namespace)
    loop = LoopThread()
    operator: OperatorRelease | None = None
    kube = KubeClient(config=pallas_crds.config(), field_manager="pallas-tests")
    try:
        llm = loop.enter(FakeOpenAI(default=decide, models=[MODEL], host=node.ip))
        operator = install_operator(pallas_crds, namespace, node.image)
        kubectl_apply(pallas_crds, *manifests(namespace, node, llm))
        yield Newsroom(pallas_crds, namespace, kube, llm)
    finally:
        kube.close()
        if operator is not None:
            operator.uninstall()
        delete_namespace(pallas_crds, namespace)
        loop.close()


async def ask(newsroom: Newsroom, agent: str, message: str) -> str:
    async with Client(newsroom.url(agent), timeout=60) as client:
        result = await client.call_tool("send_message", {"message": message})
    return str(result.content[0].text)


async def test_a_chain_and_a_router_answer_through_their_steps_pods(newsroom: Newsroom) -> None:
    for agent in [*STEPS, *WORKFLOWS]:
        await until(
            f"{agent} Ready", lambda a=agent: newsroom.ready(a), READY_WITHIN, diagnose=newsroom.diagnose
        )
    wide = newsroom.cluster.kubectl("get", "pa", "-n", newsroom.namespace, "-o", "wide").stdout
    article_row = next(line for line in wide.splitlines() if line.startswith("article "))
    assert article_row.split()[-1] == "chain", wide  # one word, the shape (not the spec's map)
    assert next(line for line in wide.splitlines() if line.startswith("desk ")).split()[-1] == "router", wide

    assert await ask(newsroom, "article", "tides") == "writer: researcher: tides"
    assert await ask(newsroom, "desk", "a poem about tides") == "writer: a poem about tides"
    assert await ask(newsroom, "desk", "why are there tides?") == "researcher: why are there tides?"
