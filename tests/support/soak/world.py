"""The soak's world on the local node: servers, namespace, operator, agents, and when it settled.

Everything the agents talk to listens on the node's bridge address, where pods reach this
machine: the scripted fake LLM (OpenAI wire format, `script.llm_script`), an OIDC issuer (each
caller is a subject of its own; agents check tokens with its keys) and PostgreSQL (the
conversations, so they outlive pods; it admits the node's pod range). The namespace gets the
operator with the chart (`helm install`, namespace-scoped, the node's image), a Secret with the
provider key, a Secret with the DSN, a PallasDeployment `soak` (OIDC auth, PostgreSQL
conversations, no registry) and two PallasAgents: `orchestrator`, which may call `researcher`.

`SoakWorld.settled()` says what is not settled yet (None once it is): every agent Ready at its
current generation, its Deployment rolled out with exactly its replicas Running and Ready and
nothing terminating, the operator likewise, and the node Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod

from pallas_io.kube import PallasAgent
from tests.support import waiting
from tests.support.cluster import LocalCluster
from tests.support.e2e import (
    LocalNode,
    LoopThread,
    OperatorRelease,
    create_namespace,
    delete_namespace,
    install_operator,
)
from tests.support.fake_llm import FakeOpenAI
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer
from tests.support.operator import kubectl_apply
from tests.support.postgres import Postgres, running_postgres
from tests.support.soak.script import ORCHESTRATOR, RESEARCHER, instruction, llm_script, role_of, text_of

DEPLOYMENT = "soak"
AGENTS = (RESEARCHER, ORCHESTRATOR)
LLM_SECRET, DB_SECRET = "soak-llm", "soak-db"
MODEL = "soak-model"
OPERATOR_LABELS = {"app.kubernetes.io/component": "operator"}


class NotSettled(Exception):
    """A wait ran out: what did not happen, and the last thing seen."""


def _not_settled(message: str) -> NoReturn:
    """How a soak's wait ends when time is up: an exception the soak reports, not a test failure."""
    raise NotSettled(message)


@dataclass
class Sightings:
    """What the fake LLM was sent, reduced to what the events wait for: which key and which
    instruction revision each agent role used, first seen when. Drained from the fake's
    request log, so its memory stays bounded however long the soak runs."""

    llm: FakeOpenAI
    keys: dict[tuple[str, str], float] = field(default_factory=dict)
    revisions: dict[tuple[str, int], float] = field(default_factory=dict)
    completions: int = 0

    def refresh(self) -> None:
        log = self.llm.requests
        count = len(log)  # the fake appends from its own thread: take a prefix, drop exactly it
        batch = log[:count]
        del log[:count]
        now = time.monotonic()
        for request in batch:
            if request.path != self.llm.completion_path or not isinstance(request.json, dict):
                continue
            self.completions += 1
            messages = request.json.get("messages") or [{}]
            system = text_of(messages[0].get("content")) if messages[0].get("role") == "system" else ""
            role = role_of(system)
            if role is None:
                continue
            key = request.headers.get("authorization", "").removeprefix("Bearer ")
            self.keys.setdefault((role[0], key), now)
            self.revisions.setdefault(role, now)

    def uses_key(self, role: str, key: str) -> bool:
        self.refresh()
        return (role, key) in self.keys

    def uses_revision(self, role: str, revision: int) -> bool:
        self.refresh()
        return (role, revision) in self.revisions


@dataclass
class SoakWorld:
    """The running world the clients talk to and the events change."""

    cluster: LocalCluster
    node: LocalNode
    namespace: str
    operator: OperatorRelease
    llm: FakeOpenAI
    issuer: Issuer
    postgres: Postgres
    kube: AsyncClient
    sightings: Sightings
    key: str
    """The provider key the Secret holds now."""
    revisions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AGENTS, 1))
    image: str = ""
    """The image the operator (and so every pod) runs now."""
    upgrade_image: str = ""
    """The image of a changed tree the `upgrade` event moves to (made before the traffic starts)."""
    notes: list[str] = field(default_factory=list)
    """What the events saw on the way (pods per node, failover time), for the report."""
    failover_seconds: float | None = None
    """How long the `node-crash` event's pods took to be Ready on the surviving node."""

    def agent_url(self, agent: str = ORCHESTRATOR) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/mcp"

    def token(self, caller: str) -> str:
        """A token of the caller's own subject, valid for two hours."""
        return self.issuer.token(sub=f"soak-{caller}", exp=int(time.time()) + 7200)

    async def kubectl(self, *args: str, namespaced: bool = True) -> str:
        """kubectl (in the soak's namespace), without blocking the clients; stdout."""
        scope = ("-n", self.namespace) if namespaced else ()
        proc = await asyncio.create_subprocess_exec(
            self.cluster.kubectl_path,
            f"--kubeconfig={self.cluster.kubeconfig}",
            *scope,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {err.decode().strip()}")
        return out.decode()

    # --- reads ----------------------------------------------------------------------------------

    async def pods(self, labels: Mapping[str, str]) -> list[Pod]:
        return [p async for p in self.kube.list(Pod, namespace=self.namespace, labels=dict(labels))]

    async def pod_uids(self, labels: Mapping[str, str]) -> set[str]:
        return {str(p.metadata.uid) for p in await self.pods(labels) if p.metadata is not None}

    async def deployment(self, name: str) -> Deployment:
        return await self.kube.get(Deployment, name, namespace=self.namespace)

    async def settled(self) -> str | None:
        """What is not settled yet, or None."""
        for name in [n["node_name"] for n in self.node.nodes] or [self.node.name]:
            node = await self.kube.get(Node, name)
            if not _condition_true(node.status.conditions if node.status else None, "Ready"):
                return f"node {name} not Ready"
            if node.spec and node.spec.unschedulable:
                return f"node {name} cordoned"
        for agent in AGENTS:
            found = await self.kube.get(PallasAgent, agent, namespace=self.namespace)
            obj: dict[str, Any] = found.to_dict()  # type: ignore[no-untyped-call]
            status = obj.get("status") or {}
            generation = obj["metadata"].get("generation")
            if status.get("phase") != "Ready" or status.get("observedGeneration") != generation:
                observed = status.get("observedGeneration")
                return (
                    f"agent {agent}: phase {status.get('phase')}, generation {generation} observed {observed}"
                )
            problem = await self._rolled_out(agent, {"pallas.dev/agent": agent})
            if problem:
                return problem
        return await self._rolled_out(self.operator.deployment, OPERATOR_LABELS)

    async def _rolled_out(self, name: str, labels: Mapping[str, str]) -> str | None:
        dep = await self.deployment(name)
        problem = rollout_problem(dep.to_dict())
        if problem:
            return f"deployment {name}: {problem}"
        pods = await self.pods(labels)
        wanted = dep.spec.replicas if dep.spec and dep.spec.replicas is not None else 1
        ready = [p for p in pods if p.metadata and p.metadata.deletionTimestamp is None and _pod_ready(p)]
        if len(pods) != wanted or len(ready) != wanted:
            return f"deployment {name}: {len(ready)} of {len(pods)} pods Ready, {wanted} wanted"
        return None

    async def until(self, what: str, probe: Callable[[], Any], within: float, interval: float = 0.5) -> float:
        """Poll `probe` (sync or async; truthy = done) until done; the seconds it took.

        Raises:
            NotSettled: not within `within` seconds.
        """
        started = time.monotonic()
        await waiting.until(what, probe, within, interval=interval, ignore=(ApiError,), fail=_not_settled)
        return time.monotonic() - started

    async def until_settled(self, within: float) -> float:
        last: list[str | None] = [None]

        async def probe() -> bool:
            last[0] = await self.settled()
            return last[0] is None

        try:
            return await self.until("the cluster settling", probe, within)
        except NotSettled:
            raise NotSettled(f"not settled within {within:g}s: {last[0]}") from None


def _condition_true(conditions: Any, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or [])


def _pod_ready(pod: Pod) -> bool:
    return bool(
        pod.status and pod.status.phase == "Running" and _condition_true(pod.status.conditions, "Ready")
    )


def rollout_problem(dep: dict[str, Any]) -> str | None:
    """Why a Deployment (as a dict) has not finished rolling out, or None: the same test as
    `kubectl rollout status`, and every replica of the current template available."""
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    wanted = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < dep["metadata"].get("generation", 0):
        return "new generation not observed yet"
    counts = {
        k: status.get(k, 0) for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
    }
    if any(value != wanted for value in counts.values()):
        return ", ".join(f"{k} {v}" for k, v in counts.items()) + f" of {wanted}"
    return None


# --- set-up ---------------------------------------------------------------------------------------


def manifests(world: SoakWorld, llm_timeout: float, replicas: int = 1) -> list[dict[str, Any]]:
    """The Secrets, the PallasDeployment and the two agents."""
    meta = {"namespace": world.namespace}

    def agent(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": name, **meta},
            "spec": {
                "deployment": DEPLOYMENT,
                "description": f"The soak's {name}",
                "instruction": instruction(name, world.revisions[name]),
                "replicas": replicas,
                **spec,
            },
        }

    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": LLM_SECRET, **meta},
         "stringData": {"OPENAI_API_KEY": world.key}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": DB_SECRET, **meta},
         "stringData": {"dsn": world.postgres.dsn}},
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": DEPLOYMENT, **meta},
            "spec": {
                "model": {"default": f"llm.{MODEL}"},
                "providers": {
                    "llm": {
                        "type": "openai",
                        "baseURL": world.llm.base_url,
                        "apiKey": {"secretKeyRef": {"name": LLM_SECRET, "key": "OPENAI_API_KEY"}},
                        "timeoutSeconds": int(llm_timeout),
                        "maxRetries": 1,
                    }
                },
                "registry": {"enabled": False},
                "healthCheck": {"intervalSeconds": 10, "timeoutSeconds": 3},
                "conversations": {
                    "store": "postgres",
                    "postgres": {"dsn": {"secretKeyRef": {"name": DB_SECRET, "key": "dsn"}}},
                },
                "auth": {"mode": "oidc", "oidc": {"issuer": world.issuer.url, "audience": AUDIENCE}},
                "runtime": {"env": [{"name": "FASTMCP_CHECK_FOR_UPDATES", "value": "off"}]},
            },
        },
        agent(RESEARCHER),
        agent(ORCHESTRATOR, agents=[RESEARCHER]),
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def soak_world(
    cluster: LocalCluster,
    node: LocalNode,
    *,
    llm_latency: float,
    ready_within: float = 180,
    replicas: int = 1,
) -> AsyncIterator[SoakWorld]:
    """Servers, namespace, operator and agents, torn down when the block ends (the namespace
    deleted; under pytest its deletion is awaited when the session ends); yields once every agent
    is Ready and the cluster settled."""
    namespace = f"soak-{secrets.token_hex(3)}"
    loop = LoopThread()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(loop.close)
        llm = loop.enter(FakeOpenAI(default=llm_script(llm_latency), models=[MODEL], host=node.ip))
        issuer = loop.enter(oidc_issuer(host=node.ip))
        postgres = stack.enter_context(running_postgres(host=node.ip, clients=node.cluster_cidr))
        await asyncio.to_thread(create_namespace, cluster, namespace)
        stack.push_async_callback(asyncio.to_thread, delete_namespace, cluster, namespace)
        operator = await asyncio.to_thread(install_operator, cluster, namespace, node.image)
        stack.push_async_callback(asyncio.to_thread, operator.uninstall)
        kube = AsyncClient(config=cluster.config(), field_manager="pallas-soak")
        stack.push_async_callback(kube.close)
        world = SoakWorld(
            cluster, node, namespace, operator, llm, issuer, postgres, kube, Sightings(llm),
            key=f"sk-soak-{secrets.token_hex(4)}", image=node.image,
        )  # fmt: skip
        await asyncio.to_thread(
            kubectl_apply, cluster, *manifests(world, llm_timeout=max(30, 4 * llm_latency), replicas=replicas)
        )
        try:
            await world.until_settled(ready_within)
        except NotSettled as exc:
            raise NotSettled(f"{exc}\n{await diagnose(world)}") from None
        yield world


async def diagnose(world: SoakWorld) -> str:
    """What the namespace and the operator say (for a wait that ran out)."""
    parts = []
    for args in (
        ("get", "pallasagents,deployments,pods", "-o", "wide"),
        ("get", "events", "--sort-by=.lastTimestamp"),
        ("logs", f"deployment/{world.operator.deployment}", "--tail=20"),
    ):
        try:
            parts.append((await world.kubectl(*args))[-3000:])
        except (RuntimeError, TimeoutError) as exc:
            parts.append(str(exc))
    return "\n".join(parts)
