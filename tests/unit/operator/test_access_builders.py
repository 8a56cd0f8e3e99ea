"""Builders of access control (golden files) and the prober's authentication per auth mode."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from pallas_api import names
from pallas_api.render import render_agent
from pallas_api.spec import CallerAuth, PallasAgentSpec, PallasDeploymentSpec
from pallas_operator.builders import (
    AgentWorkload,
    Owner,
    access_children,
    agent_deployment,
    agents_network_policy,
    auth_delegation_binding,
)
from pallas_operator.engine.prober import ProbeAccess, Prober, ProbeTarget
from pallas_operator.service_resolver import ServiceResolver
from pallas_operator.status import HealthResult, Verification
from tests.support.operator import agent, at, deployment

GOLDEN = Path(__file__).parent / "golden"
OWNER = Owner(names.DEPLOYMENT_KIND, "ouranos", "agents", "uid-deployment")


def _golden(name: str, objects: Any) -> None:
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("PALLAS_UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(objects, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with PALLAS_UPDATE_GOLDEN=1 and review it"
    assert yaml.safe_load(path.read_text()) == objects, f"{name} differs from {path}"


def _deployment(*mods: Any) -> PallasDeploymentSpec:
    return PallasDeploymentSpec.model_validate(deployment("ouranos", *mods)["spec"])


def test_kubernetes_mode_identity_golden() -> None:
    _golden("access", [*access_children(OWNER, ["writer", "research"]), auth_delegation_binding(OWNER)])


def test_no_agents_no_role_an_empty_resource_list_would_grant_every_agent() -> None:
    assert [m["kind"] for m in access_children(OWNER, [])] == ["ServiceAccount"]


def test_network_policy_golden() -> None:
    network = {
        "policy": True,
        "allowFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}},
            {
                "namespaceSelector": {"matchLabels": {"team": "web"}},
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
            },
        ],
    }
    spec = _deployment(at("spec.network", network))
    _golden(
        "network-policy",
        agents_network_policy(OWNER, spec, "pallas-system", {"app.kubernetes.io/name": "pallas"}),
    )
    outside = agents_network_policy(OWNER, spec, None, {})
    assert not any(
        "namespaceSelector" in s and "podSelector" in s and "pallas-system" in str(s)
        for s in outside["spec"]["ingress"][0]["from"]
    )


IRSA = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/bedrock-agents"}


@pytest.mark.parametrize(
    ("mode", "annotations", "account", "mount"),
    [
        ("kubernetes", {}, "ouranos-agents", True),
        ("none", {}, "default", False),
        ("none", IRSA, "ouranos-agents", False),  # the cloud's identity, and still no API token
        ("kubernetes", IRSA, "ouranos-agents", True),
    ],
)
def test_agent_pods_get_api_credentials_only_in_kubernetes_mode(
    mode: str, annotations: dict[str, str], account: str, mount: bool
) -> None:
    dep = _deployment(at("spec.auth.mode", mode), at("spec.runtime.serviceAccount.annotations", annotations))
    spec = PallasAgentSpec.model_validate(agent("research")["spec"])
    rendered = render_agent("research", spec, dep, {}, namespace="agents", url="http://r/mcp")
    owner = Owner(names.AGENT_KIND, "research", "agents", "uid")
    workload = AgentWorkload(owner, "ouranos", spec, dep, rendered.secrets, "hash", "pallas:test")
    pod = agent_deployment(workload)["spec"]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == (account, mount)


# --- the prober ---------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_probes_authenticate_as_the_deployment_mode_says() -> None:
    seen: list[tuple[str, Mapping[str, str]]] = []
    minted: list[ProbeAccess] = []

    async def verify(url: str, budget: float, headers: Mapping[str, str]) -> Verification:
        seen.append(("verify", headers))
        return Verification(ok=True, tools=("get_health",))

    async def check(url: str, budget: float, headers: Mapping[str, str]) -> HealthResult:
        seen.append(("check", headers))
        return HealthResult("ok")

    async def challenge(url: str, budget: float, issuer: str) -> Verification:
        seen.append(("challenge", {"issuer": issuer}))
        return Verification(ok=True, message="asks", without_token=True)

    async def credentials(access: ProbeAccess) -> str:
        minted.append(access)
        if access.service_account == "broken-agents":
            raise RuntimeError("cannot mint a probe token for ServiceAccount agents/broken-agents: 404")
        return "minted-token"

    notified: list[Hashable] = []
    prober = Prober(
        ServiceResolver({}), notified.append, verify, check, credentials=credentials, challenge=challenge
    )
    kube = ProbeAccess(CallerAuth("kubernetes", audiences=("pallas.dev",)), "agents", "ouranos-agents")
    oidc = ProbeAccess(CallerAuth("oidc", issuer="https://id", audience="agents"))
    broken = ProbeAccess(CallerAuth("kubernetes"), "agents", "broken-agents")
    prober.track("k", ProbeTarget("http://k/mcp", 60, 1, 1, "h", kube))
    prober.track("o", ProbeTarget("http://o/mcp", 60, 1, 1, "h", oidc))
    prober.track("b", ProbeTarget("http://b/mcp", 60, 1, 1, "h", broken))
    await asyncio.sleep(0.5)
    await prober.stop()
    assert ("verify", {"Authorization": "Bearer minted-token"}) in seen
    assert ("check", {"Authorization": "Bearer minted-token"}) in seen
    assert ("challenge", {"issuer": "https://id"}) in seen
    assert kube in minted
    assert all(kind != "check" or headers for kind, headers in seen)  # oidc agents are not health-checked
    prober2 = Prober(
        ServiceResolver({}), notified.append, verify, check, credentials=credentials, challenge=challenge
    )
    prober2.track("o", ProbeTarget("http://o/mcp", 60, 1, 1, "h", oidc))
    prober2.track("b", ProbeTarget("http://b/mcp", 60, 1, 1, "h", broken))
    await asyncio.sleep(0.5)
    oidc_verification, oidc_health = prober2.results("o")
    broken_verification, _ = prober2.results("b")
    await prober2.stop()
    assert oidc_verification is not None
    assert oidc_verification.without_token
    assert oidc_health is not None
    assert not oidc_health.checkable
    assert broken_verification is not None
    assert not broken_verification.ok
    assert "cannot mint a probe token" in broken_verification.message
