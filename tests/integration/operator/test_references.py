"""References, ordering and cycles: what a PallasAgent names must exist, dependencies go first."""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event

from pallas_io.kube import PallasAgent
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
    quiet,
    secret,
    spec,
    total,
)

SETTLED_AFTER = 1.0
"""Seconds without a reconcile or a write after which the operator's first rounds are over."""
HOT_LOOP_WINDOW = 4.0
"""Seconds in which a hot loop (a reconcile asking for itself, or a write echoing back into a
write) would show; nothing changes meanwhile, so nothing may be reconciled or written."""


async def _accepted(client: AsyncClient, ns: str, name: str, expected: tuple[str, str]) -> dict[str, Any]:
    async def check() -> Any:
        obj = await get_object(client, PallasAgent, ns, name)
        return obj if condition(obj, "Accepted") == expected else None

    found: dict[str, Any] = await eventually(check, 30, f"{name} Accepted={expected}")
    return found


async def _warnings(client: AsyncClient, ns: str, name: str) -> list[tuple[str, str]]:
    return [
        (e.reason or "", e.message or "")
        async for e in client.list(Event, namespace=ns)
        if e.involvedObject.name == name and e.type == "Warning"
    ]


async def _reasons_once(client: AsyncClient, ns: str, name: str, reason: str) -> list[str] | None:
    """The reasons of the agent's Warning Events, once one has `reason` (None before)."""
    reasons = [r for r, _ in await _warnings(client, ns, name)]
    return reasons if reason in reasons else None


async def test_missing_references_are_named_in_status_and_an_event_then_resolved(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    kubectl_apply(pallas_crds, agent("research", in_namespace(namespace)))
    obj = await _accepted(kube_client, namespace, "research", ("False", "DeploymentNotFound"))
    assert obj["status"]["phase"] == "Failed"
    assert "'ouranos'" in next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Accepted")
    events = await eventually(lambda: _warnings(kube_client, namespace, "research"), 10, "a Warning Event")
    assert events[0][0] == "DeploymentNotFound"

    # The Secret "llm" does not exist: the operator reads no Secret and accepts the agent; its
    # pod starts (optional Secret sources) and says what it lacks (test_agent.py).
    kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace)))
    await _accepted(kube_client, namespace, "research", ("True", "Accepted"))
    assert await get_object(kube_client, Deployment, namespace, "research") is not None

    kubectl_apply(pallas_crds, agent("research", in_namespace(namespace), spec(servers=["argos", "nope"])))
    # An undefined server is a warning (the gateway seed): accepted, running on the rest.
    obj = await _accepted(kube_client, namespace, "research", ("True", "ServerNotFound"))
    assert "nope" in obj["status"]["conditions"][0]["message"]
    assert await get_object(kube_client, Deployment, namespace, "research") is not None
    reasons = await eventually(
        lambda: _reasons_once(kube_client, namespace, "research", "ServerNotFound"),
        10,
        "a ServerNotFound Event",
    )
    assert reasons.count("DeploymentNotFound") == 1, "events are posted on transitions, not every reconcile"


async def test_a_dependency_cycle_is_refused(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    ns = in_namespace(namespace)
    kubectl_apply(
        pallas_crds,
        secret("llm", None, ns),
        deployment("ouranos", ns),
        agent("alpha", ns, spec(agents=["beta"])),
        agent("beta", ns, spec(dependsOn=["gamma"])),
        agent("gamma", ns, spec(dependsOn=["alpha"])),
    )
    for name in ("alpha", "beta", "gamma"):
        obj = await _accepted(kube_client, namespace, name, ("False", "DependencyCycle"))
        assert obj["status"]["phase"] == "Failed"
    message = next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Accepted")
    assert message.endswith("gamma -> alpha -> beta -> gamma")
    assert await get_object(kube_client, Deployment, namespace, "alpha") is None

    # Breaking the cycle frees all three (alpha still waits for beta, beta for gamma).
    kubectl_apply(pallas_crds, agent("gamma", ns))
    for name in ("alpha", "beta", "gamma"):
        await _accepted(kube_client, namespace, name, ("True", "Accepted"))


async def test_dependent_waits_without_pods_and_starts_when_its_dependency_is_ready(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    ns = in_namespace(namespace)
    async with fake_agent("base") as (_, server):
        pallas_operator.route("base", server.port)
        kubectl_apply(
            pallas_crds,
            secret("llm", None, ns),
            deployment("ouranos", ns),
            agent("base", ns),
            agent("top", ns, spec(agents=["base"])),
        )

        async def waiting() -> Any:
            obj = await get_object(kube_client, PallasAgent, namespace, "top")
            return obj if condition(obj, "DependenciesReady") == ("False", "DependenciesNotReady") else None

        obj = await eventually(waiting, 30, "top waiting for base")
        assert obj["status"]["phase"] == "Waiting"
        assert await get_object(kube_client, Deployment, namespace, "base") is not None
        assert await get_object(kube_client, Deployment, namespace, "top") is None, (
            "no pods before base is Ready"
        )

        await pods_ready(kube_client, namespace, {"pallas.dev/agent": "base"})

        async def started() -> Any:
            return await get_object(kube_client, Deployment, namespace, "top")

        dep = await eventually(started, 30, "top's Deployment once base is Ready")
        base = await get_object(kube_client, PallasAgent, namespace, "base")
        assert condition(base, "Ready") == ("True", "AgentReady")
        assert dep["spec"]["replicas"] == 1


async def test_deleting_the_deployment_removes_its_registry_and_agents_report_it(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    ns = in_namespace(namespace)
    kubectl_apply(pallas_crds, secret("llm", None, ns), deployment("ouranos", ns), agent("research", ns))

    async def registry() -> Any:
        return await get_object(kube_client, Deployment, namespace, "ouranos-registry")

    await eventually(registry, 30, "the registry Deployment")
    await _accepted(kube_client, namespace, "research", ("True", "Accepted"))
    pallas_crds.kubectl("delete", "pallasdeployment", "ouranos", "-n", namespace)
    await _accepted(kube_client, namespace, "research", ("False", "DeploymentNotFound"))

    async def registry_gone() -> bool:
        return await registry() is None

    # The garbage collector needs a while to discover a new CRD kind; be generous.
    await eventually(registry_gone, 90, "garbage collection of the registry")
    assert await get_object(kube_client, Deployment, namespace, "research") is not None, (
        "agent pods keep running"
    )


async def test_an_invalid_reference_in_a_valid_manifest_never_hot_loops(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    ns = in_namespace(namespace)
    kubectl_apply(
        pallas_crds,
        deployment("ouranos", ns, at("spec.model.default", "vllm.x")),
        agent("research", ns, spec(model="other.model", agents=["ghost"])),
    )
    await _accepted(kube_client, namespace, "research", ("False", "AgentNotFound"))
    metrics = pallas_operator.runner.metrics
    counters = ("pallas_operator_reconcile_total", "pallas_operator_api_writes_total")
    # The last status writes' own watch events come back and are reconciled; then all is still.
    await quiet(pallas_operator, counters, SETTLED_AFTER, within=30)
    before = tuple(total(metrics, name) for name in counters)
    await asyncio.sleep(HOT_LOOP_WINDOW)
    after = tuple(total(metrics, name) for name in counters)
    assert after == before, f"reconciles/writes while nothing changed: {before} -> {after}"
