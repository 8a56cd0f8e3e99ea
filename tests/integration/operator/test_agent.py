"""A PallasAgent on the real control plane: children, status transitions, MCP verification, health."""

from __future__ import annotations

from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Service

from pallas_api import names
from pallas_api.config import parse_config
from pallas_io.kube import PallasAgent, PallasDeployment
from tests.support.cluster import LocalCluster
from tests.support.operator import (
    RunningOperator,
    agent,
    at,
    condition,
    deployment,
    eventually,
    fake_agent,
    get_object,
    in_namespace,
    kubectl_apply,
    pods_ready,
    secret,
)

AGENT_PODS = {"pallas.dev/agent": "research"}


def _setup(cluster: LocalCluster, ns: str, *agent_mods: Any) -> None:
    kubectl_apply(
        cluster,
        secret("llm", None, in_namespace(ns)),
        deployment("ouranos", in_namespace(ns), at("spec.healthCheck.intervalSeconds", 5)),
        agent("research", in_namespace(ns), *agent_mods),
    )


async def test_kubectl_apply_gives_the_agent_its_children(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    _setup(pallas_crds, namespace)

    async def children() -> Any:
        wanted = ((ConfigMap, "research-config"), (Deployment, "research"), (Service, "research"))
        found = [await get_object(kube_client, kind, namespace, name) for kind, name in wanted]
        return found if all(found) else None

    config_map, dep, svc = await eventually(children, 30, "ConfigMap, Deployment and Service of the agent")
    owner = (await get_object(kube_client, PallasAgent, namespace, "research")) or {}
    for child in (config_map, dep, svc):
        ref = child["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("PallasAgent", "research", owner["metadata"]["uid"])
        assert child["metadata"]["labels"]["pallas.dev/deployment"] == "ouranos"
        managers = {m["manager"] for m in child["metadata"]["managedFields"]}
        assert "pallas-operator" in managers
    assert "sk-test-1" not in str(config_map)
    pod = dep["spec"]["template"]
    assert len(pod["metadata"]["annotations"]["pallas.dev/config-hash"]) == 64
    container = pod["spec"]["containers"][0]
    assert container["image"] == "pallas:test"
    key_ref = {"secretKeyRef": {"name": "llm", "key": "VLLM_KEY"}}
    assert {"name": "PALLAS_PROVIDER_VLLM_API_KEY", "valueFrom": key_ref} in container["env"]
    assert svc["spec"]["sessionAffinity"] == "ClientIP"

    async def progressing() -> Any:
        obj = await get_object(kube_client, PallasAgent, namespace, "research")
        return obj if (obj or {}).get("status", {}).get("phase") == "Progressing" else None

    status = (await eventually(progressing, 30, "phase Progressing"))["status"]
    assert condition({"status": status}, "Accepted") == ("True", "Accepted")
    assert condition({"status": status}, "Available") == ("False", "DeploymentUnavailable")
    assert status["url"] == f"http://research.{namespace}.svc.cluster.local:8000/mcp"
    assert status["model"] == "qwen3-8b"


async def test_an_agent_on_another_model_gets_that_models_capabilities_in_its_config(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    vision = {"vision": True, "contextWindow": 200000, "maxOutputTokens": 64000}
    kubectl_apply(
        pallas_crds,
        secret("llm", None, in_namespace(namespace)),
        deployment(
            "ouranos",
            in_namespace(namespace),
            at("spec.model.capabilities", {"vision": False, "contextWindow": 32768, "maxOutputTokens": 8192}),
            at("spec.model.models", {"vllm.qwen2-vl-7b": vision}),
        ),
        agent("research", in_namespace(namespace), at("spec.model", "vllm.qwen2-vl-7b")),
        agent("writer", in_namespace(namespace)),
    )

    async def capabilities(name: str) -> Any:
        config_map = await get_object(kube_client, ConfigMap, namespace, f"{name}-config")
        if config_map is None:
            return None
        return parse_config(yaml.safe_load(config_map["data"][names.CONFIG_FILE])).capabilities

    research = await eventually(lambda: capabilities("research"), 30, "the research agent's ConfigMap")
    writer = await eventually(lambda: capabilities("writer"), 30, "the writer agent's ConfigMap")
    assert (research.vision, research.context_window, research.max_output_tokens) == (True, 200000, 64000)
    assert (writer.vision, writer.context_window, writer.max_output_tokens) == (False, 32768, 8192)


async def test_available_agent_is_verified_over_mcp_and_its_health_followed(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    async with fake_agent("research") as (health, server):
        pallas_operator.route("research", server.port)
        _setup(pallas_crds, namespace)
        await pods_ready(kube_client, namespace, AGENT_PODS)

        async def phase(wanted: str) -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "research")
            return obj if (obj or {}).get("status", {}).get("phase") == wanted else None

        status = (await eventually(lambda: phase("Ready"), 30, "phase Ready"))["status"]
        assert status["serverInfo"] == {
            "name": "research",
            "version": "1.0.0",
            "protocolVersion": "2025-11-25",
        }
        assert status["tools"] == ["get_health", "send_message"]  # the stand-in agent's tools
        assert status["health"]["status"] == "ok"
        assert status["readyReplicas"] == 1
        assert condition({"status": status}, "Ready") == ("True", "AgentReady")

        health.health = {"status": "ok", "busy": True, "inFlight": 4}

        async def busy() -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "research")
            return obj if ((obj or {}).get("status", {}).get("health") or {}).get("busy") else None

        status = (await eventually(busy, 20, "status.health.busy"))["status"]
        assert (status["phase"], status["health"]["status"]) == ("Ready", "ok")

        health.health = {"status": "degraded", "message": "argos: connection refused"}
        status = (await eventually(lambda: phase("Degraded"), 20, "phase Degraded"))["status"]
        assert "busy" not in status["health"]
        assert status["health"]["message"] == "argos: connection refused"
        assert condition({"status": status}, "Healthy") == ("False", "HealthDegraded")
        assert condition({"status": status}, "Ready") == ("True", "AgentReady")

        async def counted() -> Any:
            dep = await get_object(kube_client, PallasDeployment, namespace, "ouranos")
            agents = ((dep or {}).get("status") or {}).get("agents")
            return agents if agents == {"total": 1, "ready": 1, "healthy": 0} else None

        await eventually(counted, 20, "the deployment counting 1 ready, 0 healthy agents")

    async def unreachable() -> Any:
        obj = await get_object(kube_client, PallasAgent, namespace, "research")
        return obj if condition(obj, "Healthy") == ("False", "HealthCheckFailed") else None

    status = (await eventually(unreachable, 20, "Healthy=False HealthCheckFailed once the agent is gone"))[
        "status"
    ]
    assert status["phase"] == "Degraded"
    assert condition({"status": status}, "Ready") == ("False", "HealthCheckFailed")
