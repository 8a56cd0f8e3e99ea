"""Access control on the real control plane: what the operator builds for `spec.auth` and
`spec.network`, and how it verifies agents that check their callers."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, ServiceAccount
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding, Role, RoleBinding

from pallas_api.render import render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_io.kube import PallasAgent, PallasDeployment
from pallas_operator.operator_rbac import CLUSTER_RULES, LEASE_RULES
from pallas_operator.runner import Runner
from tests.support.access import KubeAccess
from tests.support.agents import run_agent_process, serve_agent
from tests.support.cluster import LocalCluster
from tests.support.fake_llm import FakeOpenAI
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer
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
    operator_settings,
    pods_ready,
    reconciled,
    running_operator,
    secret,
    spec,
)

KUBERNETES = at("spec.auth", {"mode": "kubernetes"})


async def _condition(
    client: AsyncClient, resource: Any, ns: str, name: str, type_: str, expected: tuple[str, str]
) -> Any:
    seen: list[Any] = []

    async def check() -> Any:
        obj = await get_object(client, resource, ns, name)
        seen[:] = [((obj or {}).get("status") or {}).get("conditions")]
        return obj if condition(obj, type_) == expected else None

    try:
        return await eventually(check, 45, f"{name} {type_}={expected}")
    except BaseException:
        print(f"last conditions of {name}: {json.dumps(seen, indent=1)}")
        raise


def _pod_account(
    kube_client: AsyncClient, namespace: str, name: str, account: str
) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """A check for `eventually`: the agent's pod template once it names `account`."""

    async def check() -> dict[str, Any] | None:
        got = await get_object(kube_client, Deployment, namespace, name)
        pod: dict[str, Any] = got["spec"]["template"]["spec"] if got else {}
        return pod if pod.get("serviceAccountName") == account else None

    return check


def _can(cluster: LocalCluster, who: str, *args: str) -> str:
    return cluster.kubectl("auth", "can-i", f"--as={who}", *args, check=False).stdout.strip()


async def test_kubernetes_mode_gives_agents_an_identity_with_exactly_the_review_rights(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    try:
        mod = in_namespace(namespace)
        kubectl_apply(
            pallas_crds,
            secret("llm", None, mod),
            deployment("ouranos", mod, KUBERNETES),
            agent("research", mod),
            agent("writer", mod),
        )
        binding_name = f"pallas:{namespace}:ouranos:auth-delegator"

        async def identity() -> Any:
            role = await get_object(kube_client, Role, namespace, "ouranos-agents")
            if role is None or role["rules"][0].get("resourceNames") != ["research", "writer"]:
                return None
            if await get_object(kube_client, RoleBinding, namespace, "ouranos-agents") is None:
                return None
            return await get_object(kube_client, ClusterRoleBinding, "", binding_name)

        binding = await eventually(
            identity, 45, "the agents' ServiceAccount, Role and auth-delegator binding"
        )
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:auth-delegator",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "ouranos-agents", "namespace": namespace},
            # The registry checks the fleet endpoint's callers with the same reviews.
            {"kind": "ServiceAccount", "name": "ouranos-registry", "namespace": namespace},
        ]
        assert binding["metadata"]["labels"]["pallas.dev/namespace"] == namespace
        assert await get_object(kube_client, ServiceAccount, namespace, "ouranos-agents") is not None
        assert await get_object(kube_client, RoleBinding, namespace, "ouranos-agents") is not None
        pod = await eventually(
            _pod_account(kube_client, namespace, "research", "ouranos-agents"),
            45,
            "research's pods on the agents' ServiceAccount",
        )
        assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("ouranos-agents", True)
        await _condition(
            kube_client, PallasDeployment, namespace, "ouranos", "Authenticated", ("True", "KubernetesRBAC")
        )

        who = f"system:serviceaccount:{namespace}:ouranos-agents"
        assert _can(pallas_crds, who, "create", "tokenreviews.authentication.k8s.io") == "yes"
        assert _can(pallas_crds, who, "create", "subjectaccessreviews.authorization.k8s.io") == "yes"
        assert _can(pallas_crds, who, "invoke", "pallasagents.pallas.dev/research", "-n", namespace) == "yes"
        assert _can(pallas_crds, who, "invoke", "pallasagents.pallas.dev/other", "-n", namespace) == "no"
        assert _can(pallas_crds, who, "get", "secrets", "-n", namespace) == "no"
        assert _can(pallas_crds, who, "list", "pods", "-n", namespace) == "no"

        # Leaving kubernetes mode takes the identity away again, the cluster-scoped binding included.
        kubectl_apply(pallas_crds, deployment("ouranos", mod))

        async def gone() -> bool:
            return (
                await get_object(kube_client, ClusterRoleBinding, "", binding_name) is None
                and await get_object(kube_client, ServiceAccount, namespace, "ouranos-agents") is None
                and await get_object(kube_client, Role, namespace, "ouranos-agents") is None
            )

        await eventually(gone, 45, "the identity removed with auth.mode none")

        # The agents' Deployments are applied by their own reconciles, which the deployment's
        # change enqueues; they may land a moment after the identity is gone (CI saw that).
        pod = await eventually(
            _pod_account(kube_client, namespace, "research", "default"),
            45,
            "research's pods back on the default ServiceAccount",
        )
        assert (pod["serviceAccountName"], pod["serviceAccount"]) == ("default", "default")
        assert pod["automountServiceAccountToken"] is False
        await _condition(
            kube_client, PallasDeployment, namespace, "ouranos", "Authenticated", ("False", "AuthDisabled")
        )

        # Deleting a kubernetes-mode deployment removes its binding too (no owner reference can).
        kubectl_apply(pallas_crds, deployment("ouranos", mod, KUBERNETES))
        await eventually(identity, 45, "the binding back")
        pallas_crds.kubectl("delete", "pallasdeployment", "ouranos", "-n", namespace)

        async def unbound() -> bool:
            return await get_object(kube_client, ClusterRoleBinding, "", binding_name) is None

        await eventually(unbound, 45, "the binding removed with its deployment")
    finally:  # a failed test must not leave the cluster-scoped binding behind
        pallas_crds.kubectl(
            "delete", "clusterrolebinding", f"pallas:{namespace}:ouranos:auth-delegator", "--ignore-not-found"
        )


async def test_a_public_url_without_auth_is_flagged_once(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    public = at("spec.registry.publicURLTemplate", "https://agents.example.com/{agent}/mcp")
    kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace), public))
    obj = await _condition(
        kube_client, PallasDeployment, namespace, "ouranos", "Authenticated", ("False", "Unauthenticated")
    )
    message = next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Authenticated")
    assert "https://agents.example.com/{agent}/mcp" in message
    assert "set spec.auth.mode to kubernetes or oidc" in message

    async def warned() -> list[Any]:
        return [
            e
            async for e in kube_client.list(Event, namespace=namespace)
            if e.reason == "Unauthenticated" and e.involvedObject.name == "ouranos"
        ]

    (event,) = await eventually(warned, 30, "a Warning Event")
    assert event.type == "Warning"
    kubectl_apply(
        pallas_crds, deployment("ouranos", in_namespace(namespace), public, at("spec.version", "2"))
    )
    # The reconcile of the new generation, Event step included, is over: a repeat would be posted.
    await reconciled(pallas_operator, kube_client, PallasDeployment, namespace, "ouranos", generation=2)
    assert len(await warned()) == 1  # posted on the transition, not on every reconcile


async def test_network_policy_admits_the_deployment_its_registry_the_operator_and_allow_from(
    pallas_crds: LocalCluster, kube_client: AsyncClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    operator_labels = {"app.kubernetes.io/name": "pallas", "app.kubernetes.io/component": "operator"}
    network = {
        "policy": True,
        "allowFrom": [
            {"namespaceSelector": {"matchLabels": {"team": "web"}}},
            {"podSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["gateway"]}]}},
        ],
    }
    async with running_operator(
        pallas_crds, namespace, pod_namespace="pallas-system", pod_labels=operator_labels
    ):
        kubectl_apply(
            pallas_crds, deployment("ouranos", in_namespace(namespace), at("spec.network", network))
        )

        async def policy() -> Any:
            return await get_object(kube_client, NetworkPolicy, namespace, "ouranos-agents")

        found = await eventually(policy, 30, "the NetworkPolicy")
        agents = {"pallas.dev/deployment": "ouranos", "app.kubernetes.io/component": "agent"}
        assert found["spec"]["podSelector"] == {"matchLabels": agents}
        assert found["spec"]["policyTypes"] == ["Ingress"]
        assert found["spec"]["ingress"] == [
            {
                "from": [
                    {"podSelector": {"matchLabels": agents}},
                    {
                        "podSelector": {
                            "matchLabels": {
                                "pallas.dev/deployment": "ouranos",
                                "app.kubernetes.io/component": "registry",
                            }
                        }
                    },
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "pallas-system"}
                        },
                        "podSelector": {"matchLabels": operator_labels},
                    },
                    {"namespaceSelector": {"matchLabels": {"team": "web"}}},
                    {
                        "podSelector": {
                            "matchExpressions": [{"key": "role", "operator": "In", "values": ["gateway"]}]
                        }
                    },
                ]
            }
        ]
        kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace)))

        async def removed() -> bool:
            return await policy() is None

        await eventually(removed, 30, "the NetworkPolicy removed with policy: false")


# --- the operator verifying agents that check callers -----------------------------------------


def _operator_rbac(cluster: LocalCluster, namespace: str, role: str) -> None:
    rbac = "rbac.authorization.k8s.io"
    subjects = [{"kind": "ServiceAccount", "name": "pallas-operator", "namespace": namespace}]
    lease = {"name": "pallas-operator-lease", "namespace": namespace}
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**lease, "name": "pallas-operator"}},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": CLUSTER_RULES},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role}, "subjects": subjects},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": lease, "rules": LEASE_RULES},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": lease,
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": lease["name"]}, "subjects": subjects},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))


async def test_the_operator_verifies_a_kubernetes_mode_agent_with_least_privilege(
    pallas_crds: LocalCluster,
    kube_client: AsyncClient,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator runs as a ServiceAccount bound to exactly its documented rules, creates the
    agents' identity, mints probe tokens of it and verifies a real `pallas agent` process that
    checks every caller with the API server."""
    role = f"pallas-operator-{secrets.token_hex(3)}"
    _operator_rbac(pallas_crds, namespace, role)
    world = KubeAccess(pallas_crds, namespace)
    try:
        operator_config = world.kubeconfig("pallas-operator", tmp_path)
        monkeypatch.setenv("KUBECONFIG", str(operator_config))
        runner = Runner(operator_settings(namespace), KubeConfig.from_file(operator_config))
        task = asyncio.create_task(runner.run())
        try:
            async with FakeOpenAI(models=["qwen3-8b"]) as llm:
                mod = in_namespace(namespace)
                dep = deployment("ouranos", mod, KUBERNETES, at("spec.providers.vllm.baseURL", llm.base_url))
                research = agent("research", mod, spec(servers=[]))
                kubectl_apply(pallas_crds, secret("llm", None, mod), dep, research)

                async def agents_identity() -> Any:
                    return await get_object(kube_client, ServiceAccount, namespace, "ouranos-agents")

                await eventually(agents_identity, 45, "the agents' ServiceAccount")
                url = f"http://research.{namespace}.svc.cluster.local:8000/mcp"
                config = render_agent(
                    "research",
                    PallasAgentSpec.model_validate(research["spec"]),
                    PallasDeploymentSpec.model_validate(dep["spec"]),
                    {},
                    namespace=namespace,
                    url=url,
                ).config
                env = {
                    "KUBECONFIG": str(world.kubeconfig("ouranos-agents", tmp_path)),
                    "PALLAS_PROVIDER_VLLM_API_KEY": "sk-test-1",
                }
                async with run_agent_process(config, env=env) as process:
                    runner.settings.resolver.overrides[f"research.{namespace}.svc.cluster.local:8000"] = (
                        f"127.0.0.1:{process.port}"
                    )
                    await pods_ready(kube_client, namespace, {"pallas.dev/agent": "research"})
                    obj = await _condition(
                        kube_client, PallasAgent, namespace, "research", "Healthy", ("True", "HealthOk")
                    )
                    assert condition(obj, "Verified") == ("True", "Verified")
                    assert condition(obj, "Ready") == ("True", "AgentReady")
                    assert {"get_health", "send_message"} <= set(obj["status"]["tools"])
                    log = process.stderr()
            # The probes went through the agent's access checks as the agents' identity.
            assert "may not invoke" not in log
            assert "refused a bearer" not in log
        finally:
            runner.stop.set()
            assert await asyncio.wait_for(task, 30) == 0
    finally:
        pallas_crds.kubectl("delete", "clusterrole,clusterrolebinding", role, "--ignore-not-found")
        pallas_crds.kubectl(
            "delete", "clusterrolebinding", f"pallas:{namespace}:ouranos:auth-delegator", "--ignore-not-found"
        )


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with oidc_issuer() as running:
        yield running


async def test_the_operator_verifies_an_oidc_agent_without_a_token(
    pallas_crds: LocalCluster,
    pallas_operator: RunningOperator,
    kube_client: AsyncClient,
    namespace: str,
    issuer: Issuer,
) -> None:
    auth = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
    mod = in_namespace(namespace)
    dep = deployment("ouranos", mod, at("spec.auth", auth))
    research = agent("research", mod, spec(servers=[]))
    kubectl_apply(pallas_crds, secret("llm", None, mod), dep, research)
    url = f"http://research.{namespace}.svc.cluster.local:8000/mcp"
    config = render_agent(
        "research",
        PallasAgentSpec.model_validate(research["spec"]),
        PallasDeploymentSpec.model_validate(dep["spec"]),
        {},
        namespace=namespace,
        url=url,
    ).config
    async with serve_agent(config) as served:
        pallas_operator.route("research", served.port)
        await pods_ready(kube_client, namespace, {"pallas.dev/agent": "research"})
        obj = await _condition(
            kube_client, PallasAgent, namespace, "research", "Verified", ("True", "VerifiedWithoutToken")
        )
    assert issuer.url in next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Verified")
    assert condition(obj, "Healthy") == ("Unknown", "HealthNotCheckable")
    assert condition(obj, "Ready") == ("True", "AgentReady")
    assert obj["status"]["phase"] == "Ready"
    await _condition(kube_client, PallasDeployment, namespace, "ouranos", "Authenticated", ("True", "OIDC"))
