"""An event trigger end to end: a crash-looping Pod on the local node starts a triage run (issue 52).

The operator is installed by the chart with `triggers.eventKinds: [{resource: pods}]` (so its
Role in the namespace lets it list and watch Pods, and it runs with `--event-kind=pods`). A
PallasTrigger on Pods labelled `app: crasher`, `when` a container restarted more than once,
names an agent on the fake LLM; a Pod of the project's image whose command exits 1 crash-loops
on the node. The kubelet's restarts are MODIFIED events; the second restart fires the trigger,
the agent answers through the LLM, and the answer is in the trigger's status.

Run alone (it starts the real node):
`flock /work/node.lock .venv/bin/pytest tests/e2e/test_event_trigger.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from lightkube import Client as KubeClient

from pallas_io.kube import PallasAgent, PallasTrigger
from tests.support import e2e
from tests.support.cluster import LocalCluster
from tests.support.conversations import user_texts
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.operator import condition, kubectl_apply

pytestmark = pytest.mark.timeout(600)  # the world's start and two kubelet back-offs, on a loaded node

MODEL = "fake-model"
DEPLOYMENT = "triage"
AGENT = "triager"
TRIGGER = "crashes"
CRASHER = "crasher"
ANSWER = "The container exits with status 1 at start: its command fails."
READY_WITHIN = 120
RUN_WITHIN = 240
"""The kubelet restarts a failing container after 10 s, then 20 s: the second restart comes about
30 s after the first start; the rest is the run (the operator's watch, the agent, the LLM)."""


@dataclass
class Crashing:
    """The namespace under test, its fake LLM and the client to look at it."""

    kube: KubeClient
    cluster: LocalCluster
    namespace: str
    node: e2e.LocalNode
    llm: FakeOpenAI
    operator: e2e.OperatorRelease

    def agent_ready(self) -> bool:
        obj = self.kube.get(PallasAgent, AGENT, namespace=self.namespace).to_dict()
        return condition(obj, "Ready") == ("True", "AgentReady")

    def trigger(self) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.get(PallasTrigger, TRIGGER, namespace=self.namespace).to_dict()
        return found

    def succeeded_run(self) -> dict[str, Any] | None:
        runs = (self.trigger().get("status") or {}).get("runs") or []
        return next((r for r in runs if r.get("outcome") == "Succeeded"), None)

    def diagnose(self) -> str:
        objects = self.cluster.kubectl(
            "get", "pods,events,pallasagents,pallastriggers", "-n", self.namespace, "-o", "wide", check=False
        ).stdout
        status = self.cluster.kubectl(
            "get", "pallastrigger", TRIGGER, "-n", self.namespace, "-o", "jsonpath={.status}", check=False
        ).stdout
        return f"{objects}\ntrigger status: {status}\noperator:\n{self.operator.log_tail(60)}"


def manifests(namespace: str, node: e2e.LocalNode, llm: FakeOpenAI) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    return [
        *e2e.quiet_deployment(namespace, DEPLOYMENT, llm.base_url, MODEL),
        e2e.agent_on_node(
            namespace, AGENT, DEPLOYMENT, node.name, instruction="Find out why a pod fails. Answer briefly."
        ),
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasTrigger",
            "metadata": {"name": TRIGGER, **meta},
            "spec": {
                "agent": AGENT,
                "message": "Pod {{ .object.metadata.name }} is {{ .reason }}: find out why.",
                "event": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "labelSelector": {"matchLabels": {"app": CRASHER}},
                    "when": "object.status.containerStatuses.exists(c, c.restartCount > 1)",
                },
            },
        },
    ]


def crasher(namespace: str, node: e2e.LocalNode) -> dict[str, Any]:
    """A Pod of the project's image whose command exits 1: the kubelet restarts it, backing off."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CRASHER, "namespace": namespace, "labels": {"app": CRASHER}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": node.image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "raise SystemExit(1)"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def crashing(pallas_crds: LocalCluster) -> Iterator[Crashing]:
    node = e2e.local_node()
    with contextlib.ExitStack() as stack:
        namespace = stack.enter_context(e2e.module_namespace(pallas_crds, "events"))
        loop = stack.enter_context(contextlib.closing(e2e.LoopThread()))
        llm = loop.enter(FakeOpenAI(default=Text(ANSWER), models=[MODEL], host=node.ip))
        # `apiGroup` is left to its default "" (the core group): `--set` cannot give an empty string.
        operator = e2e.install_operator(
            pallas_crds, namespace, node.image, extra={"triggers.eventKinds[0].resource": "pods"}
        )
        stack.callback(operator.uninstall)
        kube = stack.enter_context(KubeClient(config=pallas_crds.config(), field_manager="pallas-tests"))
        kubectl_apply(pallas_crds, *manifests(namespace, node, llm))
        yield Crashing(kube, pallas_crds, namespace, node, llm, operator)


async def test_a_crash_looping_pod_starts_a_triage_run_whose_answer_is_in_status(crashing: Crashing) -> None:
    await e2e.until("the agent Ready", crashing.agent_ready, READY_WITHIN, diagnose=crashing.diagnose)
    await e2e.until(
        "the trigger Ready (Watching)",
        lambda: condition(crashing.trigger(), "Ready") == ("True", "Watching"),
        60,
        diagnose=crashing.diagnose,
    )
    assert condition(crashing.trigger(), "Accepted") == ("True", "Accepted")
    kubectl_apply(crashing.cluster, crasher(crashing.namespace, crashing.node))

    run = await e2e.until("a succeeded run", crashing.succeeded_run, RUN_WITHIN, diagnose=crashing.diagnose)

    assert run["answerExcerpt"] == ANSWER
    assert run["conversationID"]
    asked = [text for r in crashing.llm.requests if isinstance(r.json, dict) for text in user_texts(r.json)]
    assert any(f"Pod {CRASHER} is " in str(text) for text in asked), asked
    status = crashing.trigger()["status"]
    assert status["lastRunTime"]
    events = crashing.cluster.kubectl(
        "get", "events", "-n", crashing.namespace, "--field-selector", f"involvedObject.name={TRIGGER}",
        "-o", "jsonpath={.items[*].reason}", check=False,
    ).stdout  # fmt: skip
    assert "RunSucceeded" in events
