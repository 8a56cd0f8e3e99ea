"""A PallasAgent on the real control plane: children, status transitions, MCP verification, health."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod, Service

from pallas_api import names
from pallas_api.config import parse_config
from pallas_api.live import config_digest
from pallas_io.kube import PallasAgent, PallasDeployment
from pallas_operator.k8s.lightkube_cluster import LightkubeCluster
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
    spec,
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
    (secrets,) = [v["projected"]["sources"] for v in pod["spec"]["volumes"] if v["name"] == "secrets"]
    assert secrets == [
        {"secret": {"name": "llm", "items": [{"key": "VLLM_KEY", "path": "PALLAS_PROVIDER_VLLM_API_KEY"}],
                    "optional": True}},
    ]  # fmt: skip
    assert not any("valueFrom" in e for e in container.get("env", []))
    assert svc["spec"]["sessionAffinity"] == "ClientIP"

    async def progressing() -> Any:
        obj = await get_object(kube_client, PallasAgent, namespace, "research")
        return obj if (obj or {}).get("status", {}).get("phase") == "Progressing" else None

    status = (await eventually(progressing, 30, "phase Progressing"))["status"]
    assert condition({"status": status}, "Accepted") == ("True", "Accepted")
    assert condition({"status": status}, "Available") == ("False", "DeploymentUnavailable")
    assert status["url"] == f"http://research.{namespace}.svc.cluster.local:8000/mcp"
    assert status["model"] == "qwen3-8b"
    assert status["configHash"] == config_digest(config_map["data"][names.CONFIG_FILE])


async def test_an_agent_whose_secret_does_not_exist_starts_and_its_pod_names_the_missing_key(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    # No Secret "llm" at all: the operator reads no Secret, so it accepts the agent and starts
    # it (the Secret volume's sources are optional); the pod is the one to say what it lacks.
    lacking = "Secret llm key VLLM_KEY"
    async with fake_agent("research") as (health, server):
        health.health = {
            "status": "error",
            "message": f"LLM: openai provider 'vllm': no API key: {lacking} is not set",
            "missingSecrets": [lacking],
        }
        pallas_operator.route("research", server.port)
        kubectl_apply(
            pallas_crds,
            deployment("ouranos", in_namespace(namespace), at("spec.healthCheck.intervalSeconds", 5)),
            agent("research", in_namespace(namespace)),
        )
        await pods_ready(kube_client, namespace, AGENT_PODS)

        async def named() -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "research")
            return obj if condition(obj, "Ready") == ("False", "SecretKeyNotFound") else None

        status = (await eventually(named, 30, "Ready=False SecretKeyNotFound"))["status"]
        assert condition({"status": status}, "Accepted") == ("True", "Accepted")
        assert condition({"status": status}, "Healthy") == ("False", "SecretKeyNotFound")
        assert lacking in next(c["message"] for c in status["conditions"] if c["type"] == "Ready")
        assert status["phase"] == "Degraded"

        # The Secret appears, the kubelet writes the file, the pod says it is fine again.
        kubectl_apply(pallas_crds, secret("llm", None, in_namespace(namespace)))
        health.health = {"status": "ok"}

        async def ready() -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "research")
            return obj if condition(obj, "Ready") == ("True", "AgentReady") else None

        await eventually(ready, 30, "Ready=True once the pod has its key")


async def test_a_live_edit_rewrites_the_config_map_and_status_follows_what_the_pod_serves(
    pallas_crds: LocalCluster,
    pallas_operator: RunningOperator,
    kube_client: AsyncClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Which agents' pods the operator looked for (each look is a list of the namespace's pods).
    looked_for: list[str] = []

    async def counted_sync_pods(cluster: LightkubeCluster, ns: str, labels: Any, config_hash: str) -> int:
        looked_for.append(dict(labels)["pallas.dev/agent"])
        return await sync_pods(cluster, ns, labels, config_hash)

    sync_pods = LightkubeCluster.sync_pods
    monkeypatch.setattr(LightkubeCluster, "sync_pods", counted_sync_pods)
    async with fake_agent("research") as (health, server):
        pallas_operator.route("research", server.port)
        # A long health interval: following a new config must not wait for it.
        kubectl_apply(
            pallas_crds,
            secret("llm", None, in_namespace(namespace)),
            deployment("ouranos", in_namespace(namespace), at("spec.healthCheck.intervalSeconds", 600)),
            agent("research", in_namespace(namespace)),
        )
        await pods_ready(kube_client, namespace, AGENT_PODS)

        async def config_text() -> str | None:
            config_map = await get_object(kube_client, ConfigMap, namespace, "research-config")
            return str(config_map["data"][names.CONFIG_FILE]) if config_map else None

        first = config_digest(await eventually(config_text, 30, "the agent's ConfigMap") or "")
        health.health = {"status": "ok", "configHash": first}

        async def serving(digest: str) -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "research")
            status = (obj or {}).get("status") or {}
            return status if status.get("servedConfigHash") == status.get("configHash") == digest else None

        await eventually(lambda: serving(first), 30, "status serving the first config")
        assert looked_for == [], "a new agent has no pods with an older config to look for"
        template = ((await get_object(kube_client, Deployment, namespace, "research")) or {})["spec"][
            "template"
        ]

        kubectl_apply(pallas_crds, agent("research", in_namespace(namespace), spec(instruction="Be brief.")))

        async def edited() -> str | None:
            text = await config_text()
            return text if text and "Be brief." in text else None

        second = config_digest(await eventually(edited, 30, "the instruction in the ConfigMap") or "")
        status = await eventually(
            lambda: _status_of(kube_client, namespace, lambda s: s.get("configHash") == second),
            30,
            "status.configHash of the edited config",
        )
        assert status["servedConfigHash"] == first  # the pod has not taken it yet

        async def nudged() -> Any:
            # The annotation that makes the kubelet write the new ConfigMap into the pod at once.
            pods = [p async for p in kube_client.list(Pod, namespace=namespace, labels=AGENT_PODS)]
            hashes = {(p.metadata.annotations or {}).get("pallas.dev/config-sync") for p in pods}
            return pods if pods and hashes == {second} else None

        await eventually(nudged, 15, "the agent's pod annotated with the new config hash")
        assert looked_for == ["research"]
        # The pod takes it (the kubelet wrote the file, the agent read it at its next turn or health
        # check): the operator, probing every 2 s while they differ, sees it long before 600 s.
        health.health = {"status": "ok", "configHash": second}
        await eventually(lambda: serving(second), 20, "status serving the edited config")
        after = ((await get_object(kube_client, Deployment, namespace, "research")) or {})["spec"]["template"]
        assert after == template, "a live edit rolls no pod"


async def _status_of(client: AsyncClient, namespace: str, check: Any) -> dict[str, Any] | None:
    obj = await get_object(client, PallasAgent, namespace, "research")
    status = (obj or {}).get("status") or {}
    return status if check(status) else None


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
