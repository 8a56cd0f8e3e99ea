"""The Kubernetes source on the real control plane: list, watch, freshness, outages, 410, RBAC."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.config.kubeconfig import Cluster, User
from lightkube.types import PatchType

from pallas_registry.builder import VENDOR_META
from pallas_registry.kubernetes import KubernetesSource, PallasAgent, PallasDeployment
from pallas_registry.schema import OFFICIAL_META
from tests.support.cluster import LocalCluster
from tests.support.registry import (
    api_proxy,
    assert_valid_catalogue,
    create_agent,
    create_deployment,
    ready_status,
    running_registry,
    set_status,
)
from tests.support.waiting import until

WELL_KNOWN = "/.well-known/mcp/server.json"
WATCH_ERRORS = 'pallas_registry_watch_restarts_total{reason="error"}'
"""Every failed list or watch attempt counts one (each reflector retries after a back-off)."""
pytestmark = pytest.mark.usefixtures("pallas_crds")


async def eventually(
    check: Callable[[], Awaitable[Any]], within: float = 15.0, what: str = "condition"
) -> Any:
    return await until(what, check, within, interval=0.05)


class Reader:
    """Reads the catalogue over HTTP and remembers every answer (to prove it was never empty)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = httpx2.AsyncClient(timeout=5)
        self.sizes: list[int] = []

    async def get(self, **params: str) -> dict[str, Any]:
        response = await self.http.get(self.base + WELL_KNOWN, params=params)
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        assert_valid_catalogue(document)
        return document

    async def agents(self, **params: str) -> list[str]:
        return sorted(e["server"]["name"].rpartition("/")[2] for e in (await self.get(**params))["servers"])

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[list[int]]:
        """Read the catalogue every 20 ms in the background; yields the sizes seen so far."""

        async def sample() -> None:
            while True:
                self.sizes.append(len((await self.get())["servers"]))
                await asyncio.sleep(0.02)

        task = asyncio.create_task(sample())
        try:
            yield self.sizes
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def metric(self, line_start: str) -> float:
        text = (await self.http.get(self.base + "/metrics")).text
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
        return sum(values)


@contextlib.asynccontextmanager
async def registry(source: KubernetesSource) -> AsyncIterator[Reader]:
    async with running_registry(source) as base:
        reader = Reader(base)
        try:
            await asyncio.wait_for(source.wait_ready(), 30)
            yield reader
        finally:
            await reader.http.aclose()


async def test_lists_every_accepted_agent_of_its_deployment(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(
        kube_client,
        namespace,
        version="2.0.0",
        registry={"namePrefix": "ca.helu.ouranos"},
        model={"default": "vllm.qwen3-8b", "capabilities": {"vision": True, "contextWindow": 100000}},
    )
    await create_agent(
        kube_client, namespace, "research", ready_status("research", namespace), capabilities=["web"]
    )
    await create_agent(kube_client, namespace, "starting", {"phase": "Progressing"})
    await create_agent(kube_client, namespace, "fresh")
    await create_agent(
        kube_client, namespace, "elsewhere", ready_status("elsewhere", namespace), deployment="other"
    )
    source = KubernetesSource(namespace, "ouranos", config=kube_cluster.config())
    async with registry(source) as reader:
        document = await reader.get(ready="true")
        assert [e["server"]["name"] for e in document["servers"]] == ["ca.helu.ouranos/research"]
        server = document["servers"][0]["server"]
        assert server["version"] == "2.0.0"
        assert server["capabilities"] == {
            "model": "qwen3-8b",
            "vision": True,
            "context_window": 100000,
            "max_output_tokens": 16384,
        }
        assert server["remotes"] == [
            {"type": "streamable-http", "url": f"http://research.{namespace}.svc.cluster.local:8000/mcp"}
        ]
        # Accepted (the operator gave it a status), not ready: listed, its phase in our _meta.
        assert await reader.agents() == ["research", "starting"]
        assert await reader.agents(include="all") == ["research", "starting"]
        starting = (await reader.get(search="starting"))["servers"][0]
        assert starting["_meta"][VENDOR_META]["phase"] == "Progressing"
        assert starting["_meta"][OFFICIAL_META]["status"] == "deprecated"
        assert await reader.metric("pallas_registry_agents_left_out") == 1
        every = KubernetesSource(namespace, None, config=kube_cluster.config())
        async with registry(every) as all_agents:
            assert await all_agents.agents() == ["elsewhere", "research", "starting"]


async def test_provider_entries_and_relative_icons_as_published(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    providers = {
        "vllm": {
            "type": "openai",
            "baseURL": "http://vllm.llm.svc:8000/v1",
            "displayName": "Local vLLM",
            "description": "Qwen on the lab GPUs",
            "capabilities": {"streaming": False, "vision": True},
        },
        "anthropic": {"type": "anthropic"},
    }
    await create_deployment(kube_client, namespace, providers=providers)
    icons = [
        {"src": "/icons/research.svg", "sizes": ["any"], "mimeType": "image/svg+xml"},
        {"src": "icons/research-48.png", "sizes": ["48x48"]},
    ]
    await create_agent(kube_client, namespace, "research", ready_status("research", namespace), icons=icons)
    await create_agent(
        kube_client,
        namespace,
        "writer",
        ready_status("writer", namespace, model="claude-sonnet-4-5"),
        model="anthropic.claude-sonnet-4-5",
    )
    source = KubernetesSource(namespace, "ouranos", config=kube_cluster.config())
    async with registry(source) as reader:
        document = await reader.get()  # validated against the upstream schemas
        entries = {e["server"]["name"].rpartition("/")[2]: e for e in document["servers"]}
        base = f"http://ouranos-registry.{namespace}.svc.cluster.local:8080"
        assert entries["research"]["server"]["icons"] == [
            {"src": f"{base}/icons/research.svg", "mimeType": "image/svg+xml", "sizes": ["any"]},
            {"src": f"{base}/icons/research-48.png", "sizes": ["48x48"]},
        ]
        assert entries["research"]["_meta"][VENDOR_META]["providers"] == [
            {
                "id": "vllm",
                "kind": "llm",
                "models": ["qwen3-8b"],
                "type": "openai",
                "displayName": "Local vLLM",
                "description": "Qwen on the lab GPUs",
                "capabilities": {"streaming": False, "tools": True, "vision": True, "jsonMode": True},
            }
        ]
        # The agent's own provider first; then each other provider whose models a call may pick.
        writer_providers = entries["writer"]["_meta"][VENDOR_META]["providers"]
        assert [p["id"] for p in writer_providers[1:]] == ["vllm"], writer_providers
        assert writer_providers[:1] == [
            {
                "id": "anthropic",
                "kind": "llm",
                "models": ["claude-sonnet-4-5"],
                "type": "anthropic",
                "displayName": "Anthropic",
                "capabilities": {"streaming": True, "tools": True, "vision": False, "jsonMode": False},
            }
        ]
        # The registry's public URL, once set, is what relative icons resolve against.
        await kube_client.patch(
            PallasDeployment,
            "ouranos",
            {"spec": {"registry": {"publicURL": "https://agents.example.com/pallas"}}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )

        async def moved() -> bool:
            icons = (await reader.get(search="research"))["servers"][0]["server"]["icons"]
            # A path from the root is the host's; a relative one keeps the registry's path prefix.
            return [icon["src"] for icon in icons] == [
                "https://agents.example.com/icons/research.svg",
                "https://agents.example.com/pallas/icons/research-48.png",
            ]

        await eventually(moved, what="icons resolved against registry.publicURL")


async def test_a_status_change_shows_within_two_seconds(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    await create_agent(kube_client, namespace, "research", ready_status("research", namespace))
    source = KubernetesSource(namespace, "ouranos", config=kube_cluster.config())
    async with registry(source) as reader:
        delays = []
        for round_ in range(8):
            ready = round_ % 2 == 1
            condition = {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "Test",
                "message": "" if ready else f"round {round_}",
                "lastTransitionTime": "2026-11-21T10:00:00Z",
            }
            status = ready_status(
                "research", namespace, phase="Ready" if ready else "Degraded", conditions=[condition]
            )
            await set_status(kube_client, namespace, "research", status)
            # From the write's acceptance: the time the API server takes to store it, long on a
            # loaded machine, is not the registry's to answer for.
            started = time.monotonic()
            await eventually(lambda ready=ready: _listed(reader, ready), within=30, what="status change")
            delays.append(time.monotonic() - started)
        print(f"status-to-catalogue delays (s): {[round(d, 3) for d in delays]}")
        assert max(delays) <= 2.0, delays
        assert statistics.median(delays) <= 0.5, delays


async def _listed(reader: Reader, ready: bool) -> bool:
    return (await reader.agents(ready="true") == ["research"]) is ready


async def test_deployment_and_deletion_changes_are_followed(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    for name in ("a", "b"):
        await create_agent(kube_client, namespace, name, ready_status(name, namespace))
    source = KubernetesSource(namespace, "ouranos", config=kube_cluster.config())
    async with registry(source) as reader:
        await kube_client.patch(
            PallasDeployment,
            "ouranos",
            {
                "spec": {
                    "version": "1.1.0",
                    "registry": {
                        "namePrefix": "com.example.agents",
                        "publicURLTemplate": "https://agents.example.com/{agent}/mcp",
                    },
                }
            },
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        renamed = await eventually(lambda: _with_prefix(reader, "com.example.agents/"), what="prefix change")
        assert {e["server"]["version"] for e in renamed["servers"]} == {"1.1.0"}
        assert renamed["servers"][0]["server"]["remotes"][0]["url"] == "https://agents.example.com/a/mcp"

        await kube_client.delete(PallasAgent, "a", namespace=namespace)
        await eventually(lambda: _agents_are(reader, ["b"]), what="deletion")
        gone = (await reader.get(include_deleted="true"))["servers"][0]
        assert gone["_meta"][OFFICIAL_META]["status"] == "deleted"


async def _with_prefix(reader: Reader, prefix: str) -> dict[str, Any] | None:
    document = await reader.get()
    names = [e["server"]["name"] for e in document["servers"]]
    return document if names and all(n.startswith(prefix) for n in names) else None


async def _agents_are(reader: Reader, names: list[str]) -> bool:
    return await reader.agents() == names


async def test_an_api_outage_keeps_the_last_catalogue_and_recovers(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    for name in ("a", "b"):
        await create_agent(kube_client, namespace, name, ready_status(name, namespace))
    async with api_proxy(kube_cluster) as proxy:
        source = KubernetesSource(namespace, "ouranos", config=proxy.kubeconfig(namespace))
        async with registry(source) as reader:
            async with reader.sampling() as sizes:
                await proxy.stop()
                await create_agent(kube_client, namespace, "c", ready_status("c", namespace))
                await kube_client.delete(PallasAgent, "a", namespace=namespace)
                await eventually(lambda: _disconnected(reader), what="outage noticed")
                failed = await reader.metric(WATCH_ERRORS)
                await eventually(
                    lambda: _more_than(reader, WATCH_ERRORS, failed), what="a reconnect failing in the outage"
                )
                assert await reader.agents() == ["a", "b"], (
                    "the last good catalogue is kept during the outage"
                )
                await proxy.start()
                await eventually(lambda: _agents_are(reader, ["b", "c"]), within=20, what="recovery")
            assert min(sizes) >= 2, "the catalogue was never empty or partial"
            assert await reader.metric(WATCH_ERRORS) >= 1
            # The other reflector may still be in its retry pause; it reconnects on its own.
            await eventually(lambda: _connected(reader), what="every watch reconnected")


async def _more_than(reader: Reader, metric: str, value: float) -> bool:
    return await reader.metric(metric) > value


async def _disconnected(reader: Reader) -> bool:
    return await reader.metric("pallas_registry_source_connected") == 0


async def _connected(reader: Reader) -> bool:
    return await reader.metric("pallas_registry_source_connected") == 1


async def test_a_410_on_resume_relists_without_emptying_the_catalogue(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    for name in ("a", "b"):
        await create_agent(kube_client, namespace, name, ready_status(name, namespace))
    async with api_proxy(kube_cluster) as proxy:
        # Short server-side watches, so the resume (and the injected 410) come quickly.
        source = KubernetesSource(namespace, "ouranos", config=proxy.kubeconfig(namespace), watch_timeout=1)
        async with registry(source) as reader:
            async with reader.sampling() as sizes:
                lists_before = proxy.lists
                proxy.gone_next_watch = True
                await eventually(lambda: _expired(source), within=30, what="a 410 on resume")
                await eventually(lambda: _relisted(proxy, lists_before), what="a relist after the 410")
                await create_agent(kube_client, namespace, "c", ready_status("c", namespace))
                await kube_client.delete(PallasAgent, "a", namespace=namespace)
                await eventually(
                    lambda: _agents_are(reader, ["b", "c"]), what="watching again after the relist"
                )
            assert min(sizes) >= 2
            assert await reader.metric('pallas_registry_watch_restarts_total{reason="expired"}') >= 1


async def _expired(source: KubernetesSource) -> bool:
    return source.restarts.get("expired", 0) >= 1


async def _relisted(proxy: Any, before: int) -> bool:
    return proxy.lists > before


@pytest.mark.parametrize("can_read_deployments", [True, False], ids=["full-role", "agents-only"])
async def test_works_with_a_read_only_service_account(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str, can_read_deployments: bool
) -> None:
    await create_deployment(kube_client, namespace, registry={"namePrefix": "ca.helu.ouranos"})
    await create_agent(kube_client, namespace, "research", ready_status("research", namespace))
    resources = "pallasagents,pallasdeployments" if can_read_deployments else "pallasagents"
    kube_cluster.kubectl("-n", namespace, "create", "serviceaccount", "registry")
    kube_cluster.kubectl(
        "-n",
        namespace,
        "create",
        "role",
        "registry-reader",
        "--verb=get,list,watch",
        f"--resource={resources}",
    )
    kube_cluster.kubectl(
        "-n",
        namespace,
        "create",
        "rolebinding",
        "registry-reader",
        "--role=registry-reader",
        f"--serviceaccount={namespace}:registry",
    )
    token = kube_cluster.kubectl("-n", namespace, "create", "token", "registry").stdout.strip()
    admin = kube_cluster.config().get()
    assert admin is not None
    config = KubeConfig.from_one(
        cluster=Cluster(
            server=admin.cluster.server, certificate_auth_data=admin.cluster.certificate_auth_data
        ),
        user=User(token=token),
        namespace=namespace,
    )
    source = KubernetesSource(namespace, "ouranos", config=config)
    async with registry(source) as reader:
        names = [e["server"]["name"] for e in (await reader.get())["servers"]]
        assert await reader.metric("pallas_registry_source_connected") == 1
    # Without the deployment, agents are still published, under the namespace-derived prefix.
    assert names == [
        f"local.cluster.svc.{namespace}/research" if not can_read_deployments else "ca.helu.ouranos/research"
    ]


async def test_vendor_meta_shows_live_health(
    kube_cluster: LocalCluster, kube_client: AsyncClient, namespace: str
) -> None:
    await create_deployment(kube_client, namespace)
    await create_agent(kube_client, namespace, "research", ready_status("research", namespace))
    source = KubernetesSource(namespace, "ouranos", config=kube_cluster.config())
    async with registry(source) as reader:
        health = {"status": "degraded", "message": "argos unreachable", "checkedAt": "2026-11-21T11:00:00Z"}
        await set_status(kube_client, namespace, "research", {"health": health})
        entry = await eventually(lambda: _degraded(reader), what="health change")
        assert entry["_meta"][VENDOR_META]["health"] == health
        assert entry["_meta"][OFFICIAL_META]["updatedAt"] >= "2026-11-21T11:00:00Z"


async def _degraded(reader: Reader) -> dict[str, Any] | None:
    servers = (await reader.get())["servers"]
    return (
        servers[0] if servers and servers[0]["_meta"][VENDOR_META]["health"]["status"] == "degraded" else None
    )
