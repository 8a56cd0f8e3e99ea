"""A PallasDeployment on the real control plane: the registry, its RBAC, ServiceMonitors, status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Service, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

from pallas_io.kube import PallasDeployment
from pallas_io.secrets import SecretFiles
from pallas_operator.k8s.resources import ServiceMonitor
from pallas_registry.kubernetes import KubernetesSource
from tests.support.cluster import LocalCluster
from tests.support.fake_llm import FakeAnthropic, FakeOpenAI
from tests.support.operator import (
    RunningOperator,
    at,
    condition,
    deployment,
    eventually,
    get_object,
    in_namespace,
    install_crds,
    kubectl_apply,
    pods_ready,
    running_operator,
    secret,
)
from tests.support.registry import running_registry

# The upstream prometheus-operator CRD, as Prometheus Operator installs it.
SERVICE_MONITOR_CRD = Path(__file__).parent / "data" / "monitoring.coreos.com_servicemonitors.yaml"


async def _deployment_condition(client: AsyncClient, ns: str, type_: str, expected: tuple[str, str]) -> Any:
    async def check() -> Any:
        obj = await get_object(client, PallasDeployment, ns, "ouranos")
        return obj if condition(obj, type_) == expected else None

    return await eventually(check, 30, f"{type_}={expected}")


async def test_a_deployment_gets_a_registry_with_read_only_rbac(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace), at("spec.registry.port", 9090)))
    obj = await _deployment_condition(
        kube_client, namespace, "RegistryAvailable", ("False", "RegistryUnavailable")
    )
    assert obj["status"]["registryURL"] == (
        f"http://ouranos-registry.{namespace}.svc.cluster.local:9090/.well-known/mcp/server.json"
    )
    dep = await get_object(kube_client, Deployment, namespace, "ouranos-registry")
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ouranos-registry"
    assert pod["containers"][0]["command"] == [
        "pallas", "registry", "--namespace", namespace, "--deployment", "ouranos", "--port", "9090",
        "--secrets-dir", "/etc/pallas-secrets",  # its Secret volume (the provider keys)
        # spec.http's request bounds, defaults (docs/api.md §1)
        "--max-head-bytes=16384", "--max-headers=100", "--head-timeout=10", "--keep-alive=5",
    ]  # fmt: skip
    svc = await get_object(kube_client, Service, namespace, "ouranos-registry")
    assert svc is not None
    assert svc["spec"]["ports"][0]["port"] == 9090
    for kind in (ServiceAccount, Role, RoleBinding):
        child = await get_object(kube_client, kind, namespace, "ouranos-registry")
        assert child is not None
        assert child["metadata"]["labels"]["app.kubernetes.io/component"] == "registry"

    who = f"--as=system:serviceaccount:{namespace}:ouranos-registry"
    can = lambda *args: pallas_crds.kubectl("auth", "can-i", who, *args, check=False).stdout.strip()  # noqa: E731
    assert can("watch", "pallasagents.pallas.dev", "-n", namespace) == "yes"
    assert can("list", "pallasagents.pallas.dev", "-n", "default") == "no"
    assert can("update", "pallasagents.pallas.dev", "-n", namespace) == "no"
    assert can("get", "secrets", "-n", namespace) == "no"

    await pods_ready(
        kube_client,
        namespace,
        {"pallas.dev/deployment": "ouranos", "app.kubernetes.io/component": "registry"},
    )
    obj = await _deployment_condition(kube_client, namespace, "Ready", ("True", "AllAgentsReady"))
    assert obj["status"]["agents"] == {"total": 0, "ready": 0, "healthy": 0}

    kubectl_apply(
        pallas_crds, deployment("ouranos", in_namespace(namespace), at("spec.registry.enabled", False))
    )

    async def registry_removed() -> bool:
        return await get_object(kube_client, Deployment, namespace, "ouranos-registry") is None

    await eventually(registry_removed, 30, "the registry removed when disabled")
    obj = await _deployment_condition(
        kube_client, namespace, "RegistryAvailable", ("True", "RegistryDisabled")
    )
    assert "registryURL" not in obj["status"]


async def test_service_monitors_follow_the_crd_and_the_setting(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: Any
) -> None:
    # The ServiceMonitor CRD is test data on this throw-away cluster: start without it.
    pallas_crds.kubectl(
        "delete", "crd", "servicemonitors.monitoring.coreos.com", "--ignore-not-found", "--wait"
    )
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    monitored = deployment(
        "ouranos",
        in_namespace(namespace),
        at("spec.monitoring.serviceMonitor", {"enabled": True, "labels": {"team": "a"}}),
    )
    async with running_operator(pallas_crds, namespace, monitoring_recheck=1.0):
        kubectl_apply(pallas_crds, monitored)
        obj = await _deployment_condition(
            kube_client, namespace, "MonitoringReady", ("False", "ServiceMonitorCRDNotFound")
        )
        assert "install the Prometheus Operator CRDs" in json.dumps(obj["status"])

        install_crds(pallas_crds, SERVICE_MONITOR_CRD)
        await _deployment_condition(
            kube_client, namespace, "MonitoringReady", ("True", "ServiceMonitorsApplied")
        )

        async def monitors() -> Any:
            found = [await get_object(kube_client, ServiceMonitor, namespace, n)
                     for n in ("ouranos-agents", "ouranos-registry")]  # fmt: skip
            return found if all(found) else None

        agents_sm, registry_sm = await eventually(monitors, 20, "both ServiceMonitors")
        assert agents_sm["spec"]["selector"]["matchLabels"] == {
            "pallas.dev/deployment": "ouranos", "app.kubernetes.io/component": "agent"
        }  # fmt: skip
        assert agents_sm["metadata"]["labels"]["team"] == "a"
        assert registry_sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]

        kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace)))

        async def pruned() -> bool:
            return not any([await get_object(kube_client, ServiceMonitor, namespace, n)
                            for n in ("ouranos-agents", "ouranos-registry")])  # fmt: skip

        await eventually(pruned, 20, "ServiceMonitors removed when disabled")

        # The status is written after the children are pruned: wait for it, not a moment.
        async def condition_gone() -> bool:
            obj = await get_object(kube_client, PallasDeployment, namespace, "ouranos")
            return condition(obj, "MonitoringReady") is None

        await eventually(condition_gone, 20, "MonitoringReady dropped when monitoring is disabled")


REGISTRY_PODS = {"pallas.dev/deployment": "ouranos", "app.kubernetes.io/component": "registry"}


def _write_secret_volume(dep: dict[str, Any], secrets: dict[str, str], folder: Path) -> None:
    """What the kubelet writes into the registry pod's Secret volume: one file per item."""
    (volume,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "secrets"]
    for source in volume["projected"]["sources"]:
        for item in source["secret"]["items"]:
            # As the kubelet does: the new version complete first, then swapped in by a rename.
            staged = folder / f"..{item['path']}.tmp"
            staged.write_text(secrets[item["key"]])
            staged.rename(folder / item["path"])


async def test_every_provider_is_checked_by_the_registry_and_shown_on_the_deployment(
    pallas_crds: LocalCluster,
    pallas_operator: RunningOperator,
    kube_client: AsyncClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The operator holds no key: the registry pod gets them all, checks, and the operator reads it."""
    keys = {"VLLM_KEY": "sk-test-1", "SPARE_KEY": "sk-ant-old-4711"}

    def ref(key: str) -> dict[str, Any]:
        return {"secretKeyRef": {"name": "llm", "key": key}}

    async with (
        FakeOpenAI(models=["qwen3-8b"], api_key="sk-test-1") as openai,
        FakeAnthropic(models=["claude-x"], api_key="sk-ant-new-0815") as anthropic,
    ):
        providers = {
            "vllm": {"type": "openai", "baseURL": openai.base_url, "apiKey": ref("VLLM_KEY")},
            # Key set, not active: no agent (there are none) and not the default model.
            "spare": {"type": "anthropic", "baseURL": anthropic.url, "apiKey": ref("SPARE_KEY")},
        }
        kubectl_apply(
            pallas_crds,
            secret("llm", keys, in_namespace(namespace)),
            deployment(
                "ouranos",
                in_namespace(namespace),
                at("spec.providers", providers),
                at("spec.healthCheck.intervalSeconds", 5),
            ),
        )

        async def registry_deployment() -> Any:
            return await get_object(kube_client, Deployment, namespace, "ouranos-registry")

        dep = await eventually(registry_deployment, 30, "the registry Deployment")
        assert not any("valueFrom" in e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"])
        volume = tmp_path / "secrets"
        volume.mkdir()
        _write_secret_volume(dep, keys, volume)
        assert sorted(p.name for p in volume.iterdir()) == [
            "PALLAS_PROVIDER_SPARE_API_KEY",
            "PALLAS_PROVIDER_VLLM_API_KEY",
        ]
        # The registry pod as the kubelet would run it: `pallas registry`'s source reading the
        # keys from its Secret volume (`--secrets-dir`), at every check.
        source = KubernetesSource(
            namespace, "ouranos", config=pallas_crds.config(), environ=SecretFiles(volume)
        )
        async with running_registry(source) as base:
            pallas_operator.route("ouranos-registry", urlsplit(base).port or 0, 8080)
            await pods_ready(kube_client, namespace, REGISTRY_PODS)
            obj = await _deployment_condition(
                kube_client, namespace, "ProvidersHealthy", ("False", "ProviderCheckFailed")
            )
            checked = {p["name"]: p for p in obj["status"]["providers"]}
            assert (checked["vllm"]["status"], checked["vllm"]["models"]) == ("ok", ["qwen3-8b"])
            assert (checked["spare"]["status"], checked["spare"]["models"]) == ("error", [])
            assert "HTTP 401" in checked["spare"]["message"]
            assert condition(obj, "Ready") == ("True", "AllAgentsReady")  # warn-only
            assert "sk-ant-old-4711" not in json.dumps(obj)

            # A rotation: the Secret changes and the kubelet rewrites the file; the same registry
            # process checks the new key, and nothing is rolled.
            keys["SPARE_KEY"] = "sk-ant-new-0815"
            kubectl_apply(pallas_crds, secret("llm", keys, in_namespace(namespace)))
            _write_secret_volume(dep, keys, volume)
            obj = await _deployment_condition(
                kube_client, namespace, "ProvidersHealthy", ("True", "ProvidersOk")
            )
            now = await registry_deployment()
            assert now["spec"]["template"] == dep["spec"]["template"]
            assert now["metadata"]["generation"] == dep["metadata"]["generation"]
    assert {p["name"]: p["status"] for p in obj["status"]["providers"]} == {"spare": "ok", "vllm": "ok"}
