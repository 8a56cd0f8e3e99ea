"""PallasTriggers on the real control plane: the operator fires a schedule at a stand-in agent.

The agent's pods are made Ready by hand (no kubelet) and its MCP endpoint is a fastmcp stand-in
on 127.0.0.1, reached through the operator's Service resolver, as the agent tests do.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from pallas_io.kube import PallasTrigger
from tests.support import operator as support
from tests.support.cluster import LocalCluster
from tests.support.operator import RunningOperator, condition, eventually, get_object, in_namespace

AGENT_PODS = {"pallas.dev/agent": "research"}


async def test_a_schedule_trigger_runs_the_agent_and_records_each_run(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    here = in_namespace(namespace)
    async with support.fake_agent("research") as (_, server):
        pallas_operator.route("research", server.port)
        support.kubectl_apply(
            pallas_crds,
            support.secret("llm", None, here),
            support.deployment("ouranos", here),
            support.agent("research", here),
            support.trigger("nightly", here, support.at("spec.schedule", {"cron": "@every 2s"})),
        )
        await support.pods_ready(kube_client, namespace, AGENT_PODS)

        async def succeeded() -> Any:
            obj = await get_object(kube_client, PallasTrigger, namespace, "nightly")
            runs = (obj or {}).get("status", {}).get("runs", [])
            return obj if any(r["outcome"] == "Succeeded" for r in runs) else None

        status = (await eventually(succeeded, 60, "a Succeeded run in the trigger's status"))["status"]
        assert condition({"status": status}, "Accepted") == ("True", "Accepted")
        assert condition({"status": status}, "Ready") == ("True", "Scheduled")
        run = next(r for r in status["runs"] if r["outcome"] == "Succeeded")
        assert run["answerExcerpt"].startswith("echo: Summarise yesterday for ")
        assert run["conversationID"].startswith("trigger-nightly-")
        assert status["nextRunTime"]

        events = [e async for e in kube_client.list(Event, namespace=namespace)]
        reasons = {e.reason for e in events if e.involvedObject.kind == "PallasTrigger"}
        assert "RunSucceeded" in reasons


async def test_a_trigger_of_a_missing_agent_is_refused_and_never_fires(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    nobody = support.at("spec.agent", "nobody")
    support.kubectl_apply(pallas_crds, support.trigger("nightly", in_namespace(namespace), nobody))

    async def refused() -> Any:
        obj = await get_object(kube_client, PallasTrigger, namespace, "nightly")
        return obj if condition(obj, "Accepted") == ("False", "AgentNotFound") else None

    status = (await eventually(refused, 30, "Accepted=False AgentNotFound"))["status"]
    assert condition({"status": status}, "Ready") == ("False", "NotAccepted")
    assert status.get("runs", []) == []
