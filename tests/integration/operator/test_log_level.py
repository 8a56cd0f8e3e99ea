"""`spec.logLevel` on the real control plane: the operator renders it into agent and registry pods.

The PallasDeployment's level is the default of its agents and its registry, an agent's own
level overrides it, and a change rolls out to the Deployments. Every pod logs JSON
(`PALLAS_LOG_FORMAT=json`), whatever terminal may be attached to it.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment

from tests.support.cluster import LocalCluster
from tests.support.operator import (
    RunningOperator,
    agent,
    at,
    deployment,
    eventually,
    get_object,
    in_namespace,
    kubectl_apply,
    secret,
)


async def _log_env(client: AsyncClient, namespace: str, name: str, level: str) -> dict[str, str] | None:
    """The Deployment's logging env once its PALLAS_LOG_LEVEL is `level`."""
    dep = await get_object(client, Deployment, namespace, name)
    if dep is None:
        return None
    env: list[dict[str, Any]] = dep["spec"]["template"]["spec"]["containers"][0].get("env", [])
    values = {e["name"]: e.get("value", "") for e in env if e["name"].startswith("PALLAS_LOG_")}
    return values if values.get("PALLAS_LOG_LEVEL") == level else None


async def test_spec_log_level_reaches_the_pods_of_agents_and_registry(
    pallas_crds: LocalCluster, pallas_operator: RunningOperator, kube_client: AsyncClient, namespace: str
) -> None:
    kubectl_apply(
        pallas_crds,
        secret("llm", None, in_namespace(namespace)),
        deployment("ouranos", in_namespace(namespace), at("spec.logLevel", "warning")),
        agent("research", in_namespace(namespace)),
        agent("writer", in_namespace(namespace), at("spec.logLevel", "debug")),
    )

    async def rendered(name: str, level: str) -> dict[str, str]:
        found = await eventually(
            lambda: _log_env(kube_client, namespace, name, level), 30, f"{name} at {level}"
        )
        return dict(found)

    assert await rendered("research", "WARNING") == {
        "PALLAS_LOG_FORMAT": "json",
        "PALLAS_LOG_LEVEL": "WARNING",
    }
    assert (await rendered("writer", "DEBUG"))["PALLAS_LOG_FORMAT"] == "json"
    assert (await rendered("ouranos-registry", "WARNING"))["PALLAS_LOG_FORMAT"] == "json"
    research = await get_object(kube_client, Deployment, namespace, "research") or {}
    env = {e["name"]: e.get("value") for e in research["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["PALLAS_NAMESPACE"], env["PALLAS_DEPLOYMENT"]) == (namespace, "ouranos")

    # A new deployment level rolls out to the agents that follow it; the agent's own stays.
    kubectl_apply(pallas_crds, deployment("ouranos", in_namespace(namespace), at("spec.logLevel", "error")))
    await rendered("research", "ERROR")
    await rendered("ouranos-registry", "ERROR")
    assert await _log_env(kube_client, namespace, "writer", "DEBUG") is not None
