"""The operator started after the objects exist, as after an install, upgrade, restart or failover.

Unrelated Secrets and ConfigMaps and 24 agents exist before the operator starts (the operator
watches neither), more agents than it has workers and listed in several pages each:
it must converge (kopf's start-up barrier holds every handler until every existing object is
indexed; a worker limit below the object count deadlocked it), say ready only once it can act,
and, restarted, converge again without a single write to children that are already current.

This is the bounded check that fails on a deadlock or a needless write; how start-up grows with
the object count (150 to 5,000 agents) is measured by bench/operator_scale.py (docs/operator.md).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Service

from pallas_io.kube import PallasAgent, PallasDeployment
from pallas_operator import wiring
from tests.support.cluster import NO_NODE, LocalCluster
from tests.support.operator import (
    RunningOperator,
    agent,
    deployment,
    eventually,
    in_namespace,
    queue_depth,
    resource_versions,
    running_operator,
    secret,
    total,
)

# More agents than the operator's 8 workers, listed in pages of LIST_PAGE: the shape that
# deadlocked kopf's start-up barrier, at a size that takes seconds, not minutes.
AGENTS_PER_NAMESPACE = 12
SECRETS_PER_NAMESPACE = 30
CONFIG_MAPS_PER_NAMESPACE = 20
LIST_PAGE = 5
CHILDREN = (ConfigMap, Deployment, Service)
QUIET_FOR = 2.0
"""Seconds without a changed object after which the first operator is done with them all."""
ECHO_WINDOW = 2.0
"""Seconds after the restarted operator's queue first drains in which a probe result or the
watch echo of a write would queue another reconcile (that might write): none may."""


def _world(namespace: str) -> list[dict[str, Any]]:
    mod = in_namespace(namespace)
    unrelated_secrets = [
        secret(f"unrelated-{i:03d}", {"token": f"value-{i}"}, mod) for i in range(SECRETS_PER_NAMESPACE)
    ]
    unrelated_config_maps = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"unrelated-{i:03d}", "namespace": namespace},
            "data": {"key": str(i)},
        }
        for i in range(CONFIG_MAPS_PER_NAMESPACE)
    ]
    return [
        secret("llm", None, mod),
        deployment("ouranos", mod),
        *unrelated_secrets,
        *unrelated_config_maps,
        *(agent(f"agent-{i:03d}", mod) for i in range(AGENTS_PER_NAMESPACE)),
    ]


@pytest.fixture
async def populated(pallas_crds: LocalCluster, kube_client: AsyncClient) -> AsyncIterator[tuple[str, str]]:
    """Two namespaces full of objects, created before any operator runs."""
    names = tuple(f"t-existing-{secrets.token_hex(3)}-{side}" for side in ("a", "b"))
    for name in names:
        await kube_client.create(
            # NO_NODE: the agent pods must not start on the local node (they would not run, and
            # their sandboxes would load the machine); the test plays no kubelet either.
            Namespace(metadata=ObjectMeta(name=name, labels={"pallas.dev/test": "true"}, annotations=NO_NODE))
        )
    limit = asyncio.Semaphore(32)

    async def create(obj: dict[str, Any]) -> None:
        async with limit:
            await kube_client.create(from_dict(obj))

    try:
        await asyncio.gather(*(create(obj) for name in names for obj in _world(name)))
        yield names[0], names[1]
    finally:
        for name in names:
            await kube_client.delete(Namespace, name)


async def _converged(client: AsyncClient, namespaces: tuple[str, ...]) -> bool:
    """Every agent has its ConfigMap, Deployment and Service and a status for its generation."""
    for ns in namespaces:
        agents = [a async for a in client.list(PallasAgent, namespace=ns)]
        current = sum(
            1 for a in agents if (a.status or {}).get("observedGeneration") == (a.metadata.generation or 0)
        )
        labels = {"app.kubernetes.io/component": "agent"}
        counts = [len([o async for o in client.list(kind, namespace=ns, labels=labels)]) for kind in CHILDREN]
        if current < AGENTS_PER_NAMESPACE or min(counts) < AGENTS_PER_NAMESPACE:
            return False
    return True


async def _versions(client: AsyncClient, namespaces: tuple[str, ...]) -> dict[Any, str]:
    out: dict[Any, str] = {}
    for ns in namespaces:
        versions = await resource_versions(client, ns, *CHILDREN, PallasAgent, PallasDeployment)
        out.update({(ns, *key): rv for key, rv in versions.items()})
    return out


@pytest.mark.parametrize("scope", ["namespaced", "cluster-wide"])
async def test_operator_converges_over_existing_objects_and_restarts_without_writes(
    pallas_crds: LocalCluster,
    kube_client: AsyncClient,
    populated: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    scope: str,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    # kopf lists each kind in pages: small ones here, so that 12 agents per namespace (and 36
    # children at the restart) take several, as thousands do with the real page size.
    monkeypatch.setattr(wiring, "LIST_PAGE", LIST_PAGE)
    watched = populated if scope == "namespaced" else ()
    settings: dict[str, Any] = {"namespaces": watched, "lease_namespace": populated[0], "workers": 8}

    async with running_operator(pallas_crds, populated[0], **settings) as first:
        await eventually(lambda: _converged(kube_client, populated), 120, "convergence over existing objects")
        assert first.runner.ready.is_set()
        assert total(first.runner.metrics, "pallas_operator_ready") == 1
        assert first.runner.operator is not None
        indexed = first.runner.operator.startup.indexed_by_kind
        # Secrets are not watched at all: the operator reads none.
        assert "Secret" not in indexed
        if scope == "namespaced":  # cluster-wide, other tests' leftovers are indexed too
            # Unrelated ConfigMaps never travel over the watch: it is filtered by label server-side.
            assert indexed["ConfigMap"] < 2 * AGENTS_PER_NAMESPACE + CONFIG_MAPS_PER_NAMESPACE

        async def quiet() -> bool:
            before = await _versions(kube_client, populated)
            await asyncio.sleep(QUIET_FOR)
            return before == await _versions(kube_client, populated)

        await eventually(quiet, 60, "the operator going quiet after convergence")
    settled = await _versions(kube_client, populated)

    async with running_operator(pallas_crds, populated[0], **settings) as second:
        operator = second.runner.operator
        assert operator is not None
        # Ready means every existing object was recorded, and the queue runs from then on.
        await eventually(lambda: _ready(second.runner.ready), 60, "the restarted operator ready")
        assert operator.startup.indexed_by_kind["PallasAgent"] >= 2 * AGENTS_PER_NAMESPACE
        await eventually(lambda: _idle(second), 60, "the restarted operator's queue emptying")
        await asyncio.sleep(ECHO_WINDOW)
        await eventually(lambda: _idle(second), 60, "the restarted operator's queue emptying again")
        if scope == "namespaced":  # cluster-wide, other tests' namespaces may be going away
            writes = total(second.runner.metrics, "pallas_operator_api_writes_total")
            assert writes == 0, f"the restarted operator wrote {writes} times to current objects"
    changed = {k for k, v in (await _versions(kube_client, populated)).items() if settled.get(k) != v}
    assert not changed, f"objects written after the restart: {sorted(changed)[:10]}"


async def _ready(ready: threading.Event) -> bool:
    return ready.is_set()


async def _idle(operator: RunningOperator) -> bool:
    # The queue lives on the operator's own loop (kopf's thread): its depth is read, not awaited.
    return queue_depth(operator) == 0
