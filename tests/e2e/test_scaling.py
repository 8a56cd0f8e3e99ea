"""The scaling loop on the real node: load above `targetInFlight` adds a pod, its end removes it,
and no turn is lost (issue 53, item 3).

One agent with `scaling: {minReplicas: 1, maxReplicas: 2, idleSeconds: 30, targetInFlight: 1}`
on the fake LLM, which holds every answer until the test releases it. Two turns held at once are
two turns in flight on the agent's one pod: the operator's loop (every 3 s, a tenth of
`idleSeconds`) reads them off the pod's `/metrics` and scales the Deployment to 2 with a
`Scaled` Event. Released, both turns are answered; 30 s without a turn and 60 s after the change
(`SCALE_IN_STABLE_SECONDS`) the loop removes one pod, which drains; a turn sent afterwards is
answered too.

Run alone (it starts the real node): `flock /work/node.lock .venv/bin/pytest tests/e2e/test_scaling.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastmcp import Client
from lightkube import Client as KubeClient
from lightkube.resources.apps_v1 import Deployment

from pallas_io.kube import PallasAgent
from tests.support import e2e
from tests.support.cluster import LocalCluster
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.operator import condition, kubectl_apply

pytestmark = pytest.mark.timeout(600)

MODEL = "fake-model"
DEPLOYMENT = "elastic"
AGENT = "busy"
ANSWER = "Done."
SCALING = {"minReplicas": 1, "maxReplicas": 2, "idleSeconds": 30, "targetInFlight": 1}
READY_WITHIN = 180
SCALE_OUT_WITHIN = 120
"""A round every 3 s, then a new pod of the node's image to start and be ready."""
SCALE_IN_WITHIN = 180
"""idleSeconds (30) and the stable period (60) after the last change, a round, and the drain."""


@dataclass
class Elastic:
    kube: KubeClient
    cluster: LocalCluster
    namespace: str
    loop: e2e.LoopThread
    llm: FakeOpenAI
    release: asyncio.Event
    operator: e2e.OperatorRelease

    @property
    def url(self) -> str:
        return f"http://{AGENT}.{self.namespace}.svc.cluster.local:8000/mcp"

    def agent(self) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.get(PallasAgent, AGENT, namespace=self.namespace).to_dict()
        return found

    def ready(self) -> bool:
        return condition(self.agent(), "Ready") == ("True", "AgentReady")

    def replicas(self) -> tuple[int, int]:
        """(spec.replicas, status.readyReplicas) of the agent's Deployment."""
        obj = self.kube.get(Deployment, AGENT, namespace=self.namespace)
        spec = obj.spec.replicas if obj.spec is not None else None
        ready = obj.status.readyReplicas if obj.status is not None else None
        return int(spec or 0), int(ready or 0)

    def scaled_events(self) -> list[str]:
        """The messages of the agent's `Scaled` Events."""
        selector = f"involvedObject.name={AGENT},reason=Scaled"
        template = "jsonpath={range .items[*]}{.message}{'\\n'}{end}"
        out = self.cluster.kubectl(
            "get", "events", "-n", self.namespace, "--field-selector", selector, "-o", template, check=False
        ).stdout
        return [line for line in out.splitlines() if line]

    def let_go(self) -> None:
        self.loop.loop.call_soon_threadsafe(self.release.set)

    def diagnose(self) -> str:
        objects = self.cluster.kubectl(
            "get", "pods,deployments,events,pallasagents", "-n", self.namespace, "-o", "wide", check=False
        ).stdout
        return f"{objects}\noperator:\n{self.operator.log_tail(60)}"


@pytest.fixture(scope="module")
def elastic(pallas_crds: LocalCluster) -> Iterator[Elastic]:
    node = e2e.local_node()
    with contextlib.ExitStack() as stack:
        kube = stack.enter_context(KubeClient(config=pallas_crds.config(), field_manager="pallas-tests"))
        namespace = stack.enter_context(e2e.module_namespace(pallas_crds, "scaling"))
        operator = e2e.install_operator(pallas_crds, namespace, node.image)
        stack.callback(operator.uninstall)
        # The fake LLM holds every answer until `let_go`; the Event binds to the servers' loop
        # when it is first waited on there.
        release = asyncio.Event()
        loop = stack.enter_context(contextlib.closing(e2e.LoopThread()))
        llm = loop.enter(FakeOpenAI(default=Hold(release, then=Text(ANSWER)), models=[MODEL], host=node.ip))
        agent = e2e.agent_on_node(
            namespace, AGENT, DEPLOYMENT, node.name, instruction="Be brief.", scaling=SCALING
        )
        kubectl_apply(pallas_crds, *e2e.quiet_deployment(namespace, DEPLOYMENT, llm.base_url, MODEL), agent)
        yield Elastic(kube, pallas_crds, namespace, loop, llm, release, operator)


async def send(url: str, message: str, conversation: str) -> str:
    async with Client(url, timeout=300) as client:
        result = await client.call_tool("send_message", {"message": message, "conversation_id": conversation})
    return str(result.content[0].text)


async def test_load_above_target_adds_a_pod_and_its_end_removes_it_without_a_lost_turn(
    elastic: Elastic,
) -> None:
    await e2e.until("the agent Ready", elastic.ready, READY_WITHIN, diagnose=elastic.diagnose)
    assert elastic.replicas() == (1, 1)  # created at max(minReplicas, 1)

    turns = [asyncio.create_task(send(elastic.url, f"Task {i}", f"c-{i}")) for i in range(2)]
    try:
        await e2e.until(
            "a second pod ready under two held turns",
            lambda: elastic.replicas() == (2, 2),
            SCALE_OUT_WITHIN,
            diagnose=elastic.diagnose,
        )
        status = elastic.agent()["status"]
        assert status["scaling"]["desiredReplicas"] == 2, status
        assert "2 turn(s) in flight, 1 per pod (targetInFlight)" in status["scaling"]["reason"], status
        assert any(m.startswith("1 → 2 pods") for m in elastic.scaled_events()), elastic.diagnose()
    finally:
        elastic.let_go()
    assert await asyncio.gather(*turns) == [ANSWER, ANSWER]  # the turns that caused it, answered

    await e2e.until(
        "back to one pod after the load",
        lambda: elastic.replicas() == (1, 1),
        SCALE_IN_WITHIN,
        diagnose=elastic.diagnose,
    )
    assert any(m.startswith("2 → 1 pods") for m in elastic.scaled_events()), elastic.diagnose()
    assert await send(elastic.url, "Task 3", "c-3") == ANSWER
    assert await send(elastic.url, "And again", "c-0") == ANSWER  # its conversation goes on
    assert elastic.ready()
