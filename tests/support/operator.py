"""Test data and fixtures for the operator.

Manifests come from small builder functions with modifiers (as cert-manager's test/unit/gen):

    agent("research", spec(model="anthropic.claude"), at("spec.service.port", 9000))

Every builder returns a fresh plain dict, so a test changes only what it is about. A
PallasDeployment's or PallasAgent's spec is checked against its pydantic model as it is built:
a field the model does not know (a typo in a test) fails there, loudly, where the API server
would drop it without a word (its pruning) and the test would pass for the wrong reason. A
manifest that carries an unknown field on purpose says so with the `unchecked` modifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from fastmcp import FastMCP
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType
from pydantic import BaseModel, ValidationError

from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec, PallasTriggerSpec
from pallas_operator.metrics import OperatorMetrics
from pallas_operator.runner import Runner
from pallas_operator.settings import OperatorSettings
from tests.support.cluster import REPO, LocalCluster
from tests.support.mcp_servers import RunningServer, serve
from tests.support.waiting import until

Manifest = dict[str, Any]
Mod = Callable[[Manifest], None]
CRDS = REPO / "crds"


def at(path: str, value: Any) -> Mod:
    """Set the value at a dotted path (creating maps on the way)."""

    def mod(obj: Manifest) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(value)

    return mod


def without(path: str) -> Mod:
    """Remove the key at a dotted path."""

    def mod(obj: Manifest) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for part in parents:
            node = node[part]
        node.pop(leaf, None)

    return mod


def spec(**fields: Any) -> Mod:
    """Set top-level spec fields (already camelCase, e.g. `dependsOn=[...]`)."""

    def mod(obj: Manifest) -> None:
        obj["spec"].update(copy.deepcopy(fields))

    return mod


def in_namespace(namespace: str) -> Mod:
    return at("metadata.namespace", namespace)


SPEC_MODELS: dict[str, type[BaseModel]] = {
    "PallasDeployment": PallasDeploymentSpec,
    "PallasAgent": PallasAgentSpec,
    "PallasTrigger": PallasTriggerSpec,
}


def unchecked(obj: Manifest) -> None:
    """Mark a manifest whose unknown field is the point of the test (the API server's refusal)."""


def unknown_fields(manifest: Manifest) -> list[str]:
    """The paths of the spec's fields its pydantic model does not know (none for other kinds)."""
    model = SPEC_MODELS.get(manifest.get("kind", ""))
    if model is None:
        return []
    try:
        model.model_validate(manifest.get("spec"))
    except ValidationError as exc:
        return [
            ".".join(str(part) for part in ("spec", *error["loc"]))
            for error in exc.errors()
            if error["type"] == "extra_forbidden"
        ]
    return []


def _build(base: Manifest, mods: tuple[Mod, ...]) -> Manifest:
    for mod in mods:
        mod(base)
    if unchecked not in mods and (unknown := unknown_fields(base)):
        kind, name = base["kind"], base["metadata"]["name"]
        raise ValueError(
            f"{kind} {name}: the test builds fields the pydantic model does not know: {unknown} "
            "(the API server would drop them; pass `unchecked` if that is the point)"
        )
    return base


def deployment(name: str = "ouranos", *mods: Mod) -> Manifest:
    """A valid PallasDeployment: one OpenAI-compatible provider keyed by a Secret, one MCP server."""
    return _build(
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "model": {"default": "vllm.qwen3-8b"},
                "providers": {
                    "vllm": {
                        "type": "openai",
                        "baseURL": "http://vllm.llm.svc:8000/v1",
                        "apiKey": {"secretKeyRef": {"name": "llm", "key": "VLLM_KEY"}},
                    }
                },
                "mcpServers": {"argos": {"url": "http://argos.tools.svc:8000/mcp"}},
            },
        },
        mods,
    )


def agent(name: str = "research", *mods: Mod) -> Manifest:
    """A valid PallasAgent of deployment `ouranos` using server `argos`."""
    return _build(
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "deployment": "ouranos",
                "description": "Researches questions",
                "instruction": "You research questions.",
                "servers": ["argos"],
            },
        },
        mods,
    )


TRIGGER_SPEC: Manifest = {
    "agent": "research",
    "message": "Summarise yesterday for {{ .trigger.namespace }}.",
    "schedule": {"cron": "0 7 * * 1-5", "timeZone": "Europe/Paris"},
}


def trigger(name: str = "nightly", *mods: Mod) -> Manifest:
    """A valid PallasTrigger (`TRIGGER_SPEC`): agent `research` every weekday at 07:00 in Paris."""
    meta = {"name": name, "namespace": "default"}
    body = {"apiVersion": "pallas.dev/v1alpha1", "kind": "PallasTrigger", "metadata": meta}
    return _build({**body, "spec": copy.deepcopy(TRIGGER_SPEC)}, mods)


def secret(name: str = "llm", data: dict[str, str] | None = None, *mods: Mod) -> Manifest:
    """A Secret with string data (`VLLM_KEY` by default)."""
    return _build(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "stringData": dict(data if data is not None else {"VLLM_KEY": "sk-test-1"}),
        },
        mods,
    )


def install_crds(cluster: LocalCluster, *paths: Path) -> None:
    """Server-side apply CRD files and wait until the API server serves them."""
    for path in paths:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        name = json.loads(cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", str(path)).stdout)
        crd = f"crd/{name['metadata']['name']}"
        cluster.kubectl("wait", "--for=condition=Established", crd, "--timeout=60s")


@pytest.fixture(scope="session")
def pallas_crds(kube_cluster: LocalCluster) -> LocalCluster:
    """The cluster with the generated Pallas CRDs installed (they stay: other sessions reuse them)."""
    install_crds(kube_cluster, *sorted(CRDS.glob("*.yaml")))
    return kube_cluster


# --- Running the operator in the test's event loop ------------------------------------------


@dataclass
class RunningOperator:
    """An operator watching one namespace, started by the `pallas_operator` fixture."""

    runner: Runner
    namespace: str
    task: asyncio.Task[int]

    @property
    def hosts(self) -> MutableMapping[str, str]:
        """Service host overrides: `hosts["<agent>.<ns>.svc.cluster.local:8000"] = "127.0.0.1:PORT"`."""
        return self.runner.settings.resolver.overrides

    def route(self, agent: str, port: int, service_port: int = 8000) -> None:
        """Send the operator's MCP probes of `agent` to a server on 127.0.0.1:`port`."""
        self.hosts[f"{agent}.{self.namespace}.svc.cluster.local:{service_port}"] = f"127.0.0.1:{port}"

    async def stop(self) -> int:
        self.runner.stop.set()
        return await asyncio.wait_for(self.task, 30)


def operator_settings(namespace: str, **overrides: Any) -> OperatorSettings:
    """Settings for a test operator: one namespace, a Lease of its own, fast lease timings."""
    values: dict[str, Any] = {
        "namespaces": (namespace,),
        "runtime_image": "pallas:test",
        "http_port": None,
        "lease_namespace": namespace,
        "lease_duration": 4.0,
        "lease_renew_every": 1.0,
        "lease_retry_every": 0.5,
        "workers": 4,
        "verify_timeout": 5.0,
    }
    values.update(overrides)
    return OperatorSettings(**values)


READY_WITHIN = 60.0


@contextlib.asynccontextmanager
async def running_operator(
    cluster: LocalCluster, namespace: str, **overrides: Any
) -> AsyncIterator[RunningOperator]:
    """Run an operator until the block ends; waits until it handles events."""
    runner = Runner(operator_settings(namespace, **overrides), cluster.config())
    task = asyncio.create_task(runner.run())
    running = RunningOperator(runner, namespace, task)
    try:
        # 60 s, the start-up target of issue 15: a cluster-wide operator also indexes every other
        # test's leftovers (about 2,500 objects after test_existing_objects' namespaced case).
        ready = asyncio.create_task(asyncio.to_thread(runner.ready.wait, READY_WITHIN))
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert runner.ready.is_set(), f"the operator did not become ready in {READY_WITHIN:g}s"
        yield running
    finally:
        runner.stop.set()
        await asyncio.wait_for(task, 30)


@pytest.fixture
async def pallas_operator(
    pallas_crds: LocalCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningOperator]:
    """An operator watching the test's namespace (kopf logs in with the cluster's kubeconfig)."""
    monkeypatch.setenv("KUBECONFIG", str(pallas_crds.kubeconfig))
    async with running_operator(pallas_crds, namespace) as running:
        yield running


# --- Driving and observing the cluster ------------------------------------------------------


async def eventually(check: Callable[[], Awaitable[Any]], within: float, what: str) -> Any:
    """Poll an async check until it returns something truthy; fail naming what never happened."""
    return await until(what, check, within, interval=0.2)


def total(metrics: OperatorMetrics, name: str) -> float:
    """The sum of a metric's samples over all label values."""
    return sum(
        sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    )


def queue_depth(operator: RunningOperator) -> float:
    """Reconciles queued or running in the operator now (its `pallas_operator_queue_depth`)."""
    return total(operator.runner.metrics, "pallas_operator_queue_depth")


async def reconciled(
    operator: RunningOperator,
    client: AsyncClient,
    resource: Any,
    namespace: str,
    name: str,
    generation: int,
    within: float = 30.0,
) -> dict[str, Any]:
    """The object once the operator has reconciled its `generation` to the end.

    `status.observedGeneration` says a reconcile of that generation wrote its status; what that
    reconcile does after the write (an Event) is done once no reconcile is queued or running,
    since the reconcile counts in the queue's depth until it returns.
    """

    async def observed() -> dict[str, Any] | None:
        obj = await get_object(client, resource, namespace, name)
        status = (obj or {}).get("status") or {}
        return obj if int(status.get("observedGeneration") or 0) >= generation else None

    obj: dict[str, Any] = await eventually(observed, within, f"{name}'s status of generation {generation}")

    async def idle() -> bool:
        return queue_depth(operator) == 0

    await eventually(idle, within, "the operator's work queue emptying")
    return obj


async def quiet(operator: RunningOperator, metrics: tuple[str, ...], window: float, within: float) -> None:
    """Wait until none of the operator's `metrics` (counters) moves for `window` seconds.

    What settles includes the cluster's own controllers answering the operator's writes, which
    the operator cannot tell apart from news; so this is a window, repeated until one is quiet.
    """

    def counts() -> tuple[float, ...]:
        return tuple(total(operator.runner.metrics, name) for name in metrics)

    async def unchanged() -> bool:
        before = counts()
        await asyncio.sleep(window)
        return counts() == before

    await eventually(unchanged, within, f"{window:g}s without a change of {', '.join(metrics)}")


def kubectl_apply(cluster: LocalCluster, *manifests: Manifest) -> None:
    """`kubectl apply` the manifests, as a user would."""
    cluster.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))


async def get_object(client: AsyncClient, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as a dict, or None when it does not exist."""
    try:
        obj = await client.get(resource, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return cast(dict[str, Any], obj.to_dict())


def condition(obj: Mapping[str, Any] | None, type_: str) -> tuple[str, str] | None:
    """(status, reason) of a condition in an object's status."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond["status"], cond["reason"]
    return None


async def make_pods_ready(client: AsyncClient, namespace: str, labels: Mapping[str, str]) -> int:
    """Play kubelet: mark every pod matching `labels` Running and Ready (status subresource).

    There is no kubelet in the test control plane; the ReplicaSet and Deployment controllers
    then count the pods available exactly as they would real ones. Returns the pods marked.
    """
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    marked = 0
    async for pod in client.list(Pod, namespace=namespace, labels=dict(labels)):
        if pod.metadata is None or pod.metadata.deletionTimestamp is not None or pod.spec is None:
            continue
        statuses = [
            {"name": c.name, "ready": True, "started": True, "restartCount": 0, "image": c.image or "",
             "imageID": "", "state": {"running": {"startedAt": now}}}
            for c in pod.spec.containers
        ]  # fmt: skip
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": conditions,
            "containerStatuses": statuses,
        }
        try:
            await client.patch(
                Pod.Status,
                pod.metadata.name or "",
                {"status": status},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            # Deleted since the list (a rollout's old ReplicaSet scaling down): a kubelet would
            # not mark it either.
            if exc.status.code != 404:
                raise
            continue
        marked += 1
    return marked


async def pods_ready(client: AsyncClient, namespace: str, labels: Mapping[str, str], count: int = 1) -> int:
    """Wait until `count` pods exist for `labels` and mark them ready."""

    async def marked() -> int:
        return await make_pods_ready(client, namespace, labels) >= count

    return cast(int, await eventually(marked, 30, f"{count} pods with {dict(labels)}"))


# --- A stand-in agent: a real MCP server with send_message and get_health --------------------


@dataclass
class FakeAgent:
    """Controls what the stand-in agent's get_health says."""

    health: dict[str, Any] = field(default_factory=lambda: {"status": "ok"})


def fake_agent_mcp(name: str, agent: FakeAgent) -> FastMCP:
    mcp = FastMCP(name, version="1.0.0")

    @mcp.tool(output_schema=None)
    def send_message(message: str, conversation_id: str | None = None) -> str:
        """Talk to the agent."""
        return f"echo: {message}"

    @mcp.tool(output_schema=None)
    def get_health() -> str:
        """The agent's health."""
        return json.dumps({"timestamp": "2026-11-21T10:00:00Z", **agent.health})

    return mcp


@contextlib.asynccontextmanager
async def fake_agent(name: str) -> AsyncIterator[tuple[FakeAgent, RunningServer]]:
    """Serve a stand-in agent named `name` on 127.0.0.1 until the block ends."""
    state = FakeAgent()
    async with serve(fake_agent_mcp(name, state)) as running:
        yield state, running


async def resource_versions(
    client: AsyncClient, namespace: str, *resources: Any
) -> dict[tuple[str, str], str]:
    """(kind, name) → resourceVersion of every object of these kinds in the namespace.

    Any write that changes an object (the operator's, kopf's, anyone's) changes its
    resourceVersion; unlike the API server's request counters this ignores other tests
    running against the same cluster.
    """
    versions: dict[tuple[str, str], str] = {}
    for resource in resources:
        async for obj in client.list(resource, namespace=namespace):
            versions[(resource.__name__, obj.metadata.name)] = obj.metadata.resourceVersion
    return versions
