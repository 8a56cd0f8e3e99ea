"""PallasTriggers on the real control plane: the operator fires a schedule at a stand-in agent.

The agent's pods are made Ready by hand (no kubelet) and its MCP endpoint is a fastmcp stand-in
on 127.0.0.1, reached through the operator's Service resolver, as the agent tests do.
"""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from pallas_api.triggers.event import EventKind
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


def config_map(namespace: str, name: str, state: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "labels": {"app": "probe"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"state": state}}


async def test_an_event_trigger_fires_on_a_change_the_real_watch_shows_but_not_on_its_initial_list(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ConfigMaps stand for the watched kind: no kubelet is needed to change them."""
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    here = in_namespace(namespace)
    on_config_maps = support.at(
        "spec",
        {
            "agent": "research",
            "message": "ConfigMap {{ .object.metadata.name }} {{ .type }}",
            "event": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "labelSelector": {"matchLabels": {"app": "probe"}},
                "when": 'object.data.state == "broken"',
            },
        },
    )
    allowed = (EventKind("", "configmaps"),)
    async with (
        support.running_operator(pallas_crds, namespace, event_kinds=allowed) as running,
        support.fake_agent("research") as (_, server),
    ):
        running.route("research", server.port)
        support.kubectl_apply(pallas_crds, config_map(namespace, "before", "broken"))
        support.kubectl_apply(
            pallas_crds,
            support.secret("llm", None, here),
            support.deployment("ouranos", here),
            support.agent("research", here),
            support.trigger("watcher", here, on_config_maps),
        )
        await support.pods_ready(kube_client, namespace, AGENT_PODS)

        async def watching() -> Any:
            obj = await get_object(kube_client, PallasTrigger, namespace, "watcher")
            return obj if condition(obj, "Ready") == ("True", "Watching") else None

        await eventually(watching, 60, "Ready=True Watching")
        support.kubectl_apply(pallas_crds, config_map(namespace, "probe", "fine"))  # when is false
        support.kubectl_apply(pallas_crds, config_map(namespace, "probe", "broken"))  # MODIFIED, true

        async def succeeded() -> Any:
            obj = await get_object(kube_client, PallasTrigger, namespace, "watcher")
            runs = (obj or {}).get("status", {}).get("runs", [])
            return runs if any(r["outcome"] == "Succeeded" for r in runs) else None

        runs = await eventually(succeeded, 60, "a Succeeded run in the trigger's status")
        # `before` was broken before the trigger: listed, never ADDED for it.
        assert [r["answerExcerpt"] for r in runs] == ["echo: ConfigMap probe MODIFIED"]
