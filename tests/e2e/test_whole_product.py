"""The whole product, end to end, as containers on the local cluster's real node.

`helm install` of the chart with the project's image (built by hack/build/image, imported into the
node) → the operator as a pod; `kubectl apply` of a Secret, a PallasDeployment and three
PallasAgents → agent and registry pods run by the real kubelet (containerd, runc), non-root with
a read-only root filesystem → Services through kube-proxy, names through CoreDNS: the operator
probes the agents and the orchestrator calls the researcher by `<agent>.<ns>.svc.cluster.local`
→ the registry over cluster DNS (this machine resolves cluster names through the cluster's DNS,
as hack/local/cluster sets it up) → a client that finds the orchestrator in the catalogue and talks to
it with a bearer and a progress token → the orchestrator asks the researcher agent, which uses
server-everything and two header-echo MCP servers (`echo` with forwardInboundAuth, `plain`
without) → the answer, progress in the seed's formats, the history prompt and the metrics.
The fake LLM and the MCP servers listen on the node's bridge address, where pods reach this
machine (never an address out there). Then the drills, each followed by status, health,
catalogue and pods within a bound: kubectl logs, exec and port-forward on the pods; a killed
container (the kubelet restarts it); a deleted pod (the ReplicaSet replaces it, the registry
follows); a rollout restart with a turn in flight (the turn finishes on the draining pod, new
clients are never refused); a downstream server stopped; a rotated LLM key and an instruction
patched during a turn (both taken by the running pods, none replaced); a deleted agent.

No test depends on another having run, or not run, before it. The module's namespace, node,
operator and servers are shared, and so is one team (`SHARED`: the PallasDeployment `e2e` with
its Secret and three agents): tests only read it or drill it in ways that heal (a killed
container, deleted pods), wait for it to be Ready first and compare counters before and after.
A test that changes the world for good (a stopped downstream server, a rotated key, a patched
instruction, a deleted agent) gets a team of its own: a PallasDeployment, Secret and agents named
for it, applied by a fixture and deleted after the test. The fake LLM (OpenAI wire format)
decides by the system prompt who is asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from a2a.types import TaskState
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from lightkube import ApiError
from lightkube import Client as KubeClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod, Service
from prometheus_client.parser import text_string_to_metric_families

from pallas_io.kube import PallasAgent, PallasDeployment
from tests.support.a2a_clients import a2a_client, stream_events, text_request
from tests.support.cluster import LocalCluster
from tests.support.e2e import (
    PALLAS,
    LocalNode,
    LoopThread,
    OperatorRelease,
    create_namespace,
    delete_namespace,
    install_operator,
    local_node,
    sample,
    scrape,
    until,
)
from tests.support.fake_llm import Call, Delay, FakeOpenAI, Hold, RecordedRequest, Text, ToolCalls
from tests.support.jaeger import Jaeger, parent_of, run_jaeger, tags
from tests.support.mcp_peers import EverythingServer, McpPeers, run_server_everything
from tests.support.mcp_servers import RunningServer, header_echo_server
from tests.support.operator import condition, kubectl_apply

pytestmark = pytest.mark.timeout(240)

DEPLOYMENT = "e2e"
AGENTS = ("researcher", "orchestrator", "summarizer")
SECRET = "llm-credentials"
FIRST_KEY = "sk-e2e-first-key"
SECOND_KEY = "sk-e2e-rotated-key"
BEARER = "Bearer e2e-user-token"
MODEL = "fake-model"

ORCHESTRATOR = "You are the orchestrator: ask the researcher, then answer the user."
RESEARCHER = "You are the researcher: use every tool you have, then report what you found."
SUMMARIZER = "You are the summarizer."
SLOW_TURN_SECONDS = 12
"""How long the summarizer's model takes to answer "slowly…" (longer than the preStop pause)."""
EDITED = "You are the summarizer, second edition."

RESEARCH_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("echo__echo_headers", {"delay": 0}),
    ("plain__echo_headers", {"delay": 0}),
    ("everything__echo", {"message": "hello from the researcher"}),
    # Reports progress (no message) twice: relayed by the researcher, then by the orchestrator.
    ("everything__trigger-long-running-operation", {"duration": 0.4, "steps": 2}),
)

# Bounds of the waits (seconds). Pod start-up is a container start and a Python import (~5 s on
# two cores); a restarted container waits out the kubelet's first back-off (10 s) too.
READY_WITHIN = 90
FOLLOW_WITHIN = 45
ROTATION_WITHIN = 150
"""A rotated Secret reaches a pod at the kubelet's next sync of it: up to 90 s (syncFrequency 1 min
times 1 to 1.5), then a turn."""
GC_WITHIN = 60
REGISTRY_WITHIN = 15


@dataclass(frozen=True)
class Team:
    """A PallasDeployment of the namespace, with its own Secret and agents (`<prefix><role>`)."""

    deployment: str
    secret: str
    prefix: str = ""
    roles: tuple[str, ...] = AGENTS
    """Of researcher, orchestrator (asks the researcher) and summarizer."""

    def agent(self, role: str) -> str:
        return f"{self.prefix}{role}"

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self.agent(role) for role in self.roles)


SHARED = Team(DEPLOYMENT, SECRET)
"""Read by every test that only looks, and drilled only in ways that heal."""


# --- the scripted LLM ---------------------------------------------------------------------


def text_of(content: Any) -> str:
    """The text of an OpenAI message content (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def last_round_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Tool name → result text of the newest tool round of an OpenAI request."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
    results: dict[str, str] = {}
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        results[names.get(message["tool_call_id"], "?")] = text_of(message["content"])
    return results


def authorization_in(result: str | None) -> str | None:
    """The Authorization a header-echo tool result says its server saw."""
    if result is None:
        return "(not called)"
    try:
        return json.loads(result)["authorization"]
    except (ValueError, KeyError, TypeError):
        return f"(unreadable: {result!r})"


def decide(body: dict[str, Any]) -> Text | ToolCalls | Delay:
    """Who is asking is told by the system prompt; what to do next by the last message."""
    messages = body["messages"]
    system = text_of(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""
    last = messages[-1]
    offered = {tool["function"]["name"] for tool in body.get("tools") or []}
    if system == ORCHESTRATOR:
        if last["role"] == "user":
            question = text_of(last["content"])
            # The researcher of the orchestrator's own team (`<agent>__send_message`).
            ask = next((t for t in sorted(offered) if t.endswith("researcher__send_message")), "none")
            return ToolCalls([Call(ask, {"message": f"research: {question}"})])
        return Text(f"Final answer: {text_of(last['content'])}")
    if system == RESEARCHER:
        if last["role"] == "user":
            calls = [Call(name, args) for name, args in RESEARCH_CALLS if name in offered]
            return ToolCalls(calls) if calls else Text("researched without tools")
        results = last_round_results(messages)
        return Text(
            f"echo saw {authorization_in(results.get('echo__echo_headers'))}; "
            f"plain saw {authorization_in(results.get('plain__echo_headers'))}; "
            f"everything said {results.get('everything__echo', '(not called)')}"
        )
    if text_of(last["content"]).startswith("slowly"):
        return Delay(SLOW_TURN_SECONDS, then=Text("A slow summary."))
    return Text("A summary.")


def cmdline(pid: int) -> str:
    """A process's command line ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def process_gone(pid: int, was: str) -> bool:
    """The process is gone (or its pid now runs something else)."""
    return cmdline(pid) != was


def system_of(request: RecordedRequest) -> str:
    messages = (request.json or {}).get("messages") or [{}]
    return text_of(messages[0].get("content")) if messages[0].get("role") == "system" else ""


# --- the world ------------------------------------------------------------------------------


@dataclass
class Servers:
    """What the agents talk to, all on the node's bridge address (where pods reach this machine)."""

    loop: LoopThread
    llm: FakeOpenAI
    echo: RunningServer
    plain: RunningServer
    everything: EverythingServer
    stop_everything: contextlib.ExitStack


@dataclass
class World:
    cluster: LocalCluster
    namespace: str
    node: LocalNode
    operator: OperatorRelease
    servers: Servers
    kube: KubeClient

    # addresses

    def agent_url(self, agent: str) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/mcp"

    def metrics_url(self, agent: str) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/metrics"

    def registry_base(self, team: Team = SHARED) -> str:
        return f"http://{team.deployment}-registry.{self.namespace}.svc.cluster.local:8080"

    def catalogue_url(self, team: Team = SHARED) -> str:
        return f"{self.registry_base(team)}/.well-known/mcp/server.json"

    # reads

    def agent(self, name: str) -> dict[str, Any] | None:
        try:
            return self.kube.get(PallasAgent, name, namespace=self.namespace).to_dict()
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def deployment_status(self, team: Team = SHARED) -> dict[str, Any]:
        obj = self.kube.get(PallasDeployment, team.deployment, namespace=self.namespace).to_dict()
        return dict(obj.get("status") or {})

    def all_pods(self, agent: str) -> list[Pod]:
        labels = {"pallas.dev/agent": agent}
        return list(self.kube.list(Pod, namespace=self.namespace, labels=labels))

    def registry_pods(self, team: Team = SHARED) -> list[Pod]:
        labels = {"app.kubernetes.io/component": "registry", "pallas.dev/deployment": team.deployment}
        return list(self.kube.list(Pod, namespace=self.namespace, labels=labels))

    def ready_pod(self, agent: str) -> Pod | None:
        """The agent's one pod, if it is Running and Ready (and no other pod of it exists)."""
        return self._only_ready(self.all_pods(agent))

    def ready_registry_pod(self, team: Team = SHARED) -> Pod | None:
        return self._only_ready(self.registry_pods(team))

    @staticmethod
    def _only_ready(pods: list[Pod]) -> Pod | None:
        if len(pods) != 1 or pods[0].metadata.deletionTimestamp is not None:
            return None
        pod = pods[0]
        if pod.status is None or pod.status.phase != "Running":
            return None
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod if ready else None

    def config_hash(self, agent: str) -> str:
        dep = self.kube.get(Deployment, agent, namespace=self.namespace)
        return str(dep.spec.template.metadata.annotations["pallas.dev/config-hash"])

    def catalogue(self, query: str = "", team: Team = SHARED) -> dict[str, dict[str, Any]] | None:
        """Agent id → catalogue entry of a team's registry (None while it does not answer 200)."""
        try:
            response = httpx2.get(self.catalogue_url(team) + query, timeout=5)
        except httpx2.TransportError:
            return None
        if response.status_code != 200:
            return None
        return {e["_meta"]["dev.pallas/agent"]["id"]: e for e in response.json()["servers"]}

    # checks

    def agent_ready(self, name: str, phase: str = "Ready") -> dict[str, Any] | None:
        """The agent when its phase is `phase` and Verified, Healthy (unless degraded) and Ready hold."""
        obj = self.agent(name)
        status = (obj or {}).get("status") or {}
        if status.get("phase") != phase:
            return None
        wanted = ("Accepted", "Available", "Verified", "Ready") + (("Healthy",) if phase == "Ready" else ())
        if all((condition(obj, t) or ("",))[0] == "True" for t in wanted):
            return obj
        return None

    def team_ready(self, team: Team) -> bool:
        """Every agent of the team Ready (`agent_ready`), and its registry listing them all so."""
        if not all(self.agent_ready(name) for name in team.agents):
            return False
        catalogue = self.catalogue(team=team)
        return (
            catalogue is not None
            and sorted(catalogue) == sorted(team.agents)
            and all(e["_meta"]["dev.pallas/agent"]["phase"] == "Ready" for e in catalogue.values())
        )

    def kubectl(self, *args: str) -> str:
        """kubectl in the module's namespace; stdout (a failure fails the test with stderr)."""
        return self.cluster.kubectl("-n", self.namespace, *args).stdout

    def diagnose(self) -> str:
        """What the cluster, the operator and the pods say (for failures)."""
        get = self.cluster.kubectl(
            "get",
            "pallasagents,pallasdeployments,deployments,pods",
            "-n",
            self.namespace,
            "-o",
            "wide",
            check=False,
        )
        parts = [f"--- kubectl get:\n{get.stdout}{get.stderr}"]
        for found in self.kube.list(PallasAgent, namespace=self.namespace):
            agent = str(found.metadata.name)
            obj = self.agent(agent)
            if obj is not None:
                parts.append(f"--- {agent} status: {json.dumps(obj.get('status'), sort_keys=True)}")
            for pod in self.all_pods(agent):
                log = self.cluster.kubectl(
                    "logs", "-n", self.namespace, pod.metadata.name, "--tail=12", check=False
                )
                parts.append(f"--- pod {pod.metadata.name} log:\n{log.stdout}{log.stderr}")
        events = self.cluster.kubectl(
            "get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp", check=False
        )
        parts.append(f"--- events:\n{events.stdout[-3000:]}")
        parts.append(f"--- operator log:\n{self.operator.log_tail(25)}")
        return "\n".join(parts)

    async def until(self, what: str, probe: Any, within: float, interval: float = 0.25) -> Any:
        return await until(what, probe, within, interval=interval, diagnose=self.diagnose)


def manifests(
    namespace: str,
    node: str,
    servers: Servers,
    team: Team = SHARED,
    everything_url: str | None = None,
    telemetry: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A team's Secret, PallasDeployment and agents (pinned to the node, as a user might); its
    `everything` server is the module's unless `everything_url` names one of the team's own;
    `telemetry` is its `spec.telemetry`."""
    meta = {"namespace": namespace}
    pinned = {"nodeSelector": {"kubernetes.io/hostname": node}}

    def agent(role: str, instruction: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": team.agent(role), **meta},
            "spec": {
                "deployment": team.deployment,
                "description": f"The e2e {role}",
                "instruction": instruction,
                "pod": pinned,
                **spec,
            },
        }

    agents = {
        "researcher": agent(
            "researcher", RESEARCHER, servers=["everything", "echo", "plain"], capabilities=["research"]
        ),
        "orchestrator": agent("orchestrator", ORCHESTRATOR, agents=[team.agent("researcher")]),
        "summarizer": agent("summarizer", SUMMARIZER),
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": team.secret, **meta},
            "stringData": {"OPENAI_API_KEY": FIRST_KEY},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": team.deployment, **meta},
            "spec": {
                "model": {"default": f"llm.{MODEL}"},
                "providers": {
                    "llm": {
                        "type": "openai",
                        "baseURL": servers.llm.base_url,
                        "apiKey": {"secretKeyRef": {"name": team.secret, "key": "OPENAI_API_KEY"}},
                        "timeoutSeconds": 30,
                        "maxRetries": 1,
                    }
                },
                "mcpServers": {
                    "everything": {"url": everything_url or servers.everything.url, "timeoutSeconds": 20},
                    "echo": {"url": servers.echo.url, "forwardInboundAuth": True},
                    "plain": {"url": servers.plain.url},
                },
                "registry": {"enabled": True, "port": 8080},
                "healthCheck": {"intervalSeconds": 5, "timeoutSeconds": 2},
                "runtime": {"env": [{"name": "FASTMCP_CHECK_FOR_UPDATES", "value": "off"}]},
                **({"telemetry": telemetry} if telemetry else {}),
            },
        },
        *(agents[role] for role in team.roles),
    ]


@pytest.fixture(scope="module")
def e2e_node(kube_cluster: LocalCluster) -> LocalNode:
    return local_node()


@pytest.fixture(scope="module")
def e2e_servers(mcp_peers: McpPeers, e2e_node: LocalNode) -> Iterator[Servers]:
    loop = LoopThread()
    stop_everything = contextlib.ExitStack()
    host = e2e_node.ip
    try:
        llm = loop.enter(FakeOpenAI(default=decide, models=[MODEL], host=host))
        echo = loop.enter(header_echo_server(host=host))
        plain = loop.enter(header_echo_server(host=host))
        everything = stop_everything.enter_context(run_server_everything(mcp_peers, host=host))
        yield Servers(loop, llm, echo, plain, everything, stop_everything)
    finally:
        stop_everything.close()
        loop.close()


@pytest.fixture(scope="module")
def e2e_namespace(pallas_crds: LocalCluster) -> Iterator[str]:
    """A namespace for the module; deleted at the end (awaited when the session ends)."""
    name = f"t-e2e-{secrets.token_hex(3)}"
    create_namespace(pallas_crds, name)
    try:
        yield name
    finally:
        delete_namespace(pallas_crds, name)


@pytest.fixture(scope="module")
def e2e_operator(
    pallas_crds: LocalCluster, e2e_namespace: str, e2e_node: LocalNode
) -> Iterator[OperatorRelease]:
    operator = install_operator(pallas_crds, e2e_namespace, e2e_node.image)
    try:
        yield operator
    finally:
        operator.uninstall()


@pytest.fixture(scope="module")
def world(
    e2e_servers: Servers,
    pallas_crds: LocalCluster,
    e2e_node: LocalNode,
    e2e_namespace: str,
    e2e_operator: OperatorRelease,
) -> Iterator[World]:
    kube = KubeClient(config=pallas_crds.config(), field_manager="pallas-tests")
    try:
        kubectl_apply(pallas_crds, *manifests(e2e_namespace, e2e_node.name, e2e_servers))
        yield World(pallas_crds, e2e_namespace, e2e_node, e2e_operator, e2e_servers, kube)
    finally:
        kube.close()


@pytest.fixture
async def shared(world: World) -> World:
    """The world once the shared team is Ready and catalogued, whatever ran before."""
    await world.until(
        "the shared team's agents Ready and catalogued as Ready",
        lambda: world.team_ready(SHARED),
        READY_WITHIN,
    )
    return world


@contextlib.contextmanager
def own_team(
    world: World, team: Team, everything_url: str | None = None, telemetry: dict[str, Any] | None = None
) -> Iterator[Team]:
    """A team's objects, applied for one test and deleted after it (the garbage collector takes
    their children, the kubelet their pods)."""
    kubectl_apply(
        world.cluster,
        *manifests(world.namespace, world.node.name, world.servers, team, everything_url, telemetry),
    )
    try:
        yield team
    finally:
        world.kubectl("delete", "pallasagent", *team.agents, "--ignore-not-found", "--wait=false")
        # Its status may still count the agents just deleted: the chart's in-use protection would
        # refuse the deletion until the operator caught up.
        force = ("annotate", "pallasdeployment", team.deployment, "pallas.dev/force=true", "--overwrite")
        world.cluster.kubectl("-n", world.namespace, *force, check=False)
        world.kubectl("delete", "pallasdeployment", team.deployment, "--ignore-not-found", "--wait=false")
        world.kubectl("delete", "secret", team.secret, "--ignore-not-found", "--wait=false")


DEGRADING = Team("e2e-degrading", "degrading-credentials", "degrading-", ("researcher", "orchestrator"))
"""Its researcher's `everything` server is its own, stopped by the test."""
ROTATING = Team("e2e-rotating", "rotating-credentials", "rotating-", ("researcher", "orchestrator"))
"""Its Secret's key is rotated by the test."""
SHRINKING = Team("e2e-shrinking", "shrinking-credentials", "shrinking-", ("researcher", "summarizer"))
"""Its summarizer is deleted by the test."""
LIVE = Team("e2e-live", "live-credentials", "live-", ("summarizer",))
"""Its summarizer's instruction is patched by the test during a turn."""
TRACED = Team("e2e-traced", "traced-credentials", "traced-", ("researcher", "orchestrator"))
"""Its spec.telemetry points at a Jaeger of the test's on the node's bridge address."""


@dataclass
class Degrading:
    team: Team
    stop_everything: contextlib.ExitStack


@pytest.fixture
def degrading(world: World, mcp_peers: McpPeers) -> Iterator[Degrading]:
    """The degrading team, with a server-everything of its own that the test may stop."""
    with contextlib.ExitStack() as stop_everything:
        everything = stop_everything.enter_context(run_server_everything(mcp_peers, host=world.node.ip))
        with own_team(world, DEGRADING, everything.url) as team:
            yield Degrading(team, stop_everything)


@pytest.fixture
def rotating(world: World) -> Iterator[Team]:
    with own_team(world, ROTATING) as team:
        yield team


@pytest.fixture
def live(world: World) -> Iterator[Team]:
    with own_team(world, LIVE) as team:
        yield team


@pytest.fixture
def traced(world: World) -> Iterator[tuple[Team, Jaeger]]:
    with (
        run_jaeger(host=world.node.ip) as jaeger,
        own_team(world, TRACED, telemetry={"endpoint": jaeger.otlp_url}) as team,
    ):
        yield team, jaeger


@pytest.fixture
def shrinking(world: World) -> Iterator[Team]:
    with own_team(world, SHRINKING) as team:
        yield team


async def until_team_ready(world: World, team: Team) -> None:
    await world.until(
        f"team {team.deployment}: every agent Ready and catalogued as Ready",
        lambda: world.team_ready(team),
        READY_WITHIN,
    )


def mcp_client(url: str) -> Client[Any]:
    transport = StreamableHttpTransport(url, headers={"Authorization": BEARER})
    return Client(transport, mode="legacy", timeout=60)


# --- the scenario ---------------------------------------------------------------------------


async def test_applied_agents_run_as_pods_become_ready_and_are_catalogued(world: World) -> None:
    for name in AGENTS:
        await world.until(
            f"agent {name} Ready (phase Ready; Verified, Healthy, Ready True)",
            lambda n=name: world.agent_ready(n),
            READY_WITHIN,
        )
    for name in AGENTS:
        status = world.agent(name)["status"]
        assert status["url"] == world.agent_url(name)
        assert status["health"]["status"] == "ok", status
        assert {"send_message", "get_health"} <= set(status["tools"]), status
        assert status["serverInfo"]["name"] == name
        assert status["model"] == MODEL
        pod = world.ready_pod(name)
        assert pod is not None, f"{name} has no single Running and Ready pod"
        assert pod.spec.nodeName == world.node.name, "agent pods run on the local node"
        container = pod.status.containerStatuses[0]
        assert container.containerID.startswith("containerd://"), container
        assert container.image == world.node.image

    deployment = await world.until(
        "the PallasDeployment Ready with 3 of 3 agents ready",
        lambda: (
            (s := world.deployment_status()).get("agents", {}).get("ready") == 3
            and (condition({"status": s}, "Ready") or ("",))[0] == "True"
            and s
        ),
        FOLLOW_WITHIN,
    )
    assert deployment["agents"]["total"] == 3
    assert deployment["registryURL"] == world.catalogue_url()

    catalogue = await world.until(
        "the registry (over cluster DNS) listing the three agents as active",
        lambda: (
            (c := world.catalogue())
            and sorted(c) == sorted(AGENTS)
            and all(e["_meta"]["dev.pallas/agent"]["phase"] == "Ready" for e in c.values())
            and c
        ),
        REGISTRY_WITHIN,
    )
    for name, entry in catalogue.items():
        official = entry["_meta"]["io.modelcontextprotocol.registry/official"]
        assert official["status"] == "active", entry
        assert entry["server"]["name"] == f"local.cluster.svc.{world.namespace}/{name}"
        assert entry["server"]["remotes"] == [{"type": "streamable-http", "url": world.agent_url(name)}]
        assert entry["_meta"]["dev.pallas/agent"]["health"]["status"] == "ok"
    research = world.catalogue("?capability=research")
    assert research is not None
    assert sorted(research) == ["researcher"]


async def test_a_client_finds_the_orchestrator_in_the_registry_and_chats(shared: World) -> None:
    world = shared
    llm, echo, plain = world.servers.llm, world.servers.echo, world.servers.plain
    catalogue = world.catalogue()
    assert catalogue is not None, "the registry does not answer"
    url = catalogue["orchestrator"]["server"]["remotes"][0]["url"]
    assert url == world.agent_url("orchestrator")
    llm_before = len(llm.requests)
    echo_before, plain_before = len(echo.requests), len(plain.requests)
    researched_before = sample(
        scrape(world.metrics_url("researcher")), "pallas_send_message_total", agent="researcher", outcome="ok"
    )
    conversation = f"e2e-chat-{secrets.token_hex(3)}"  # a conversation of this test's own

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    question = "Who wrote The Republic?"
    async with mcp_client(url) as client:
        health = json.loads((await client.call_tool("get_health", {})).content[0].text)
        assert health["status"] == "ok", health
        result = await client.call_tool(
            "send_message",
            {"message": question, "conversation_id": conversation},
            progress_handler=on_progress,
        )
        answer = result.content[0].text
        history = await client.get_prompt("orchestrator_history", {"conversation_id": conversation})

    # The answer went orchestrator → researcher → tools and back, with the bearer only at `echo`.
    assert not result.is_error, answer
    assert answer.startswith("Final answer: echo saw [redacted]; plain saw None; "), answer
    assert "everything said Echo: hello from the researcher" in answer, answer

    # Progress in the seed's formats: the orchestrator's steps, the sub-agent's steps relayed,
    # and the downstream tools' (and server-everything's own progress) relayed through it.
    messages = [m for _, _, m in progress]
    expected = [
        "orchestrator step 1 (llm)",
        "orchestrator step 2 (tool)",
        "researcher/send_message: started",
        "researcher/send_message: researcher step 1 (llm)",
        "researcher/send_message: researcher step 2 (tool)",
        "researcher/send_message: echo/echo_headers: started",
        "researcher/send_message: echo/echo_headers: completed",
        "researcher/send_message: plain/echo_headers: completed",
        "researcher/send_message: everything/echo: completed",
        "researcher/send_message: everything/trigger-long-running-operation: progress",
        "researcher/send_message: everything/trigger-long-running-operation: completed",
        "researcher/send_message: researcher step 3 (llm)",
        "researcher/send_message: completed",
        "orchestrator step 3 (llm)",
    ]
    missing = [m for m in expected if m not in messages]
    assert not missing, f"progress lacks {missing}; got {messages}"
    assert messages.index("orchestrator step 1 (llm)") < messages.index("researcher/send_message: started")
    assert messages.index("researcher/send_message: completed") < messages.index("orchestrator step 3 (llm)")
    # One counter per call, as MCP requires of a token's progress: rising, with no total.
    numbers = [p for p, _, _ in progress]
    assert numbers == sorted(set(numbers)), progress
    assert {t for _, t, _ in progress} == {None}, progress

    # The conversation is in the orchestrator's history prompt, its delegation as tool activity.
    turns = [(m.role, m.content.text) for m in history.messages]
    assert turns[0] == ("user", question)
    assert turns[1][0] == "assistant"
    assert turns[1][1].startswith("[tool call] researcher__send_message {"), turns
    assert turns[2][0] == "assistant"
    assert turns[2][1].startswith("[tool result] researcher__send_message: echo saw [redacted]"), turns
    assert turns[3:] == [("assistant", answer)]

    # What the LLM saw: the bearer reached `echo` (forwardInboundAuth) and not `plain`.
    seen = [r for r in llm.requests[llm_before:] if r.path == llm.completion_path]
    research = [r for r in seen if system_of(r) == RESEARCHER]
    assert len(research) == 2, [system_of(r) for r in seen]
    offered = {t["function"]["name"] for t in research[0].json["tools"]}
    assert {n for n, _ in RESEARCH_CALLS} <= offered, offered
    results = last_round_results(research[1].json["messages"])
    assert authorization_in(results["echo__echo_headers"]) == "[redacted]"  # the caller's, scrubbed
    assert authorization_in(results["plain__echo_headers"]) is None
    assert all(r.headers.get("authorization") == f"Bearer {FIRST_KEY}" for r in seen)
    # …and what the servers themselves recorded (tool calls and the operator's health probes).
    assert any(r.headers.get("authorization") == BEARER for r in echo.requests[echo_before:])
    assert plain.requests[plain_before:], "plain was never called"
    assert all("authorization" not in r.headers for r in plain.requests), "the bearer leaked to plain"

    # The metrics, scraped from the pods through their Services.
    orchestrator = scrape(world.metrics_url("orchestrator"))
    sent = sample(orchestrator, "pallas_send_message_total", agent="orchestrator", outcome="ok")
    assert sent is not None, "pallas_send_message_total{orchestrator,ok} missing"
    assert sent >= 1
    delegated = sample(
        orchestrator,
        "pallas_tool_calls_total",
        agent="orchestrator",
        server="researcher",
        operation="tool",
        outcome="ok",
    )
    assert delegated is not None, "pallas_tool_calls_total orchestrator→researcher missing"
    assert delegated >= 1
    researcher = scrape(world.metrics_url("researcher"))
    for server in ("echo", "plain", "everything"):
        calls = sample(
            researcher,
            "pallas_tool_calls_total",
            agent="researcher",
            server=server,
            operation="tool",
            outcome="ok",
        )
        assert calls is not None, f"pallas_tool_calls_total researcher→{server} missing"
        assert calls >= 1
    researched = sample(researcher, "pallas_send_message_total", agent="researcher", outcome="ok")
    assert researched == (researched_before or 0) + 1, "one delegated turn reached the researcher"
    assert sample(researcher, "pallas_downstream_up", agent="researcher", server="echo") == 1
    tokens = sample(orchestrator, "pallas_llm_tokens_total", agent="orchestrator", model=MODEL, kind="input")
    assert tokens is not None
    assert tokens > 0

    # `pallas chat`, resolving the agent by name through the registry, as the README shows.
    chat = await asyncio.create_subprocess_exec(
        str(PALLAS),
        "chat",
        "-m",
        "And who was his teacher?",
        "--bearer",
        "e2e-user-token",
        "--timeout",
        "60",
        "--registry",
        world.registry_base(),
        "orchestrator",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(chat.communicate(), 90)
    assert chat.returncode == 0, err.decode()
    assert out.decode().startswith("Final answer: echo saw [redacted]; plain saw None"), out
    assert "researcher/send_message" in err.decode(), "pallas chat shows progress lines while waiting"


async def test_an_a2a_client_finds_the_cards_and_its_bearer_reaches_the_tools(shared: World) -> None:
    """A2A beside MCP on the pods: the registry names each card and serves them all (read by the
    registry pod over cluster DNS); the a2a-sdk client streams a turn whose delegation and tools
    are the MCP ones, its bearer forwarded as an MCP caller's."""
    world = shared
    catalogue = world.catalogue()
    assert catalogue is not None, "the registry does not answer"
    base = world.agent_url("orchestrator").removesuffix("/mcp")
    assert catalogue["orchestrator"]["_meta"]["dev.pallas/agent"]["a2a"] == {
        "agentCard": f"{base}/.well-known/agent-card.json",
        "url": f"{base}/a2a",
    }
    cards = httpx2.get(world.registry_base() + "/a2a/agent-cards", timeout=10).json()
    by_name = {a["name"].rsplit("/", 1)[1]: a for a in cards["agents"]}
    assert by_name["orchestrator"]["card"]["supportedInterfaces"][0]["url"] == f"{base}/a2a", by_name
    async with a2a_client(base, streaming=True, bearer="Bearer e2e-user-token") as client:
        events = await stream_events(client, text_request("Who wrote The Republic?"))
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, events[-1]
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    answer = [c for c in chunks if c.last_chunk][-1].artifact.parts[0].text
    assert answer.startswith("Final answer: echo saw [redacted]; plain saw None; "), answer
    steps = [
        e.status_update.status.message.parts[0].text
        for e in events
        if e.HasField("status_update") and e.status_update.status.message.parts
    ]
    assert "researcher/send_message: started" in steps, steps


async def test_discovery_by_the_drafts_and_both_protocol_eras_on_the_pods(shared: World) -> None:
    """The registry's MCP Catalog lists each agent's Server Card, read by the registry pod from the
    agent over cluster DNS; the card says what /mcp asks (here nothing: the deployment's auth.mode is
    none, the bearer a caller sends is only forwarded); a 2026-07-28 client
    negotiates with server/discover and a legacy one with the handshake, on the same endpoint."""
    world = shared
    catalogue = world.catalogue()
    assert catalogue is not None, "the registry does not answer"
    url = world.agent_url("orchestrator")
    catalog = httpx2.get(world.registry_base() + "/.well-known/mcp/catalog.json", timeout=10).json()
    by_name = {s["name"].rsplit("/", 1)[1]: s for s in catalog["servers"]}
    item = by_name["orchestrator"]
    assert item["serverCard"] == f"{url}/server-card", item
    card = httpx2.get(item["serverCard"], timeout=10).json()
    assert item["card"] == card, item
    server = catalogue["orchestrator"]["server"]
    assert (card["name"], card["version"], card["remotes"][0]["url"]) == (
        server["name"],
        server["version"],
        server["remotes"][0]["url"],
    )
    assert card["remotes"][0]["authentication"] == {"required": False, "schemes": []}
    transport = StreamableHttpTransport(url, headers={"Authorization": BEARER})
    async with Client(transport, timeout=60) as modern:
        assert modern.protocol_version == "2026-07-28"
        assert modern.initialize_result is None
        capabilities = modern.server_capabilities
        assert capabilities is not None
        assert card["capabilities"] == capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
    async with mcp_client(url) as legacy:
        assert legacy.initialize_result is not None
        assert "send_message" in {t.name for t in await legacy.list_tools()}


async def test_the_pods_are_non_root_containers_with_a_read_only_root(shared: World) -> None:
    world = shared
    probe = (
        "import json, os\n"
        "def writable(path):\n"
        "    try:\n"
        "        with open(os.path.join(path, '.probe'), 'w'): pass\n"
        "        os.remove(os.path.join(path, '.probe'))\n"
        "        return True\n"
        "    except OSError as exc:\n"
        "        return exc.strerror\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'caps': caps,\n"
        "    'home': os.environ['HOME'], 'root': writable('/'), 'venv': writable('/opt/pallas'),\n"
        "    'tmp': writable('/tmp')}))\n"
    )
    registry = world.ready_registry_pod()
    assert registry is not None
    operator = world.kubectl("get", "pods", "-l", "app.kubernetes.io/component=operator", "-o", "name")
    pods = {
        "researcher": f"pod/{world.ready_pod('researcher').metadata.name}",  # type: ignore[union-attr]
        "registry": f"pod/{registry.metadata.name}",
        "operator": operator.split()[0],
    }
    for what, pod in pods.items():
        seen = json.loads(world.kubectl("exec", pod, "--", "python", "-c", probe))
        assert (seen["uid"], seen["gid"]) == (65532, 65532), (what, seen)
        assert int(seen["caps"], 16) == 0, f"{what} has capabilities: {seen}"
        assert seen["root"] == seen["venv"] == "Read-only file system", (what, seen)
        assert seen["tmp"] is True, f"{what} cannot write its /tmp (HOME {seen['home']})"

    # Cluster DNS and Services inside the pods: the orchestrator finds the researcher's Service.
    researcher_ip = world.kube.get(Service, "researcher", namespace=world.namespace).spec.clusterIP
    orchestrator = f"pod/{world.ready_pod('orchestrator').metadata.name}"  # type: ignore[union-attr]
    name = f"researcher.{world.namespace}.svc.cluster.local"
    resolved = world.kubectl(
        "exec", orchestrator, "--", "python", "-c", f"import socket; print(socket.gethostbyname({name!r}))"
    )
    assert resolved.strip() == researcher_ip
    assert (
        f"http://{name}:8000/mcp"
        in world.kube.get(ConfigMap, "orchestrator-config", namespace=world.namespace).data["agent.yaml"]
    )
    dns = world.cluster.kubectl(
        "get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "name"
    ).stdout
    assert dns.strip(), "CoreDNS runs as the kube-dns pods"


async def test_kubectl_logs_and_port_forward_reach_the_containers(shared: World) -> None:
    world = shared
    pod = world.ready_pod("researcher")
    assert pod is not None
    logs = world.kubectl("logs", pod.metadata.name)
    assert '"agent researcher serving on http://0.0.0.0:8000/mcp' in logs, logs[-2000:]
    forward = await asyncio.create_subprocess_exec(
        world.cluster.kubectl_path,
        f"--kubeconfig={world.cluster.kubeconfig}",
        "-n",
        world.namespace,
        "port-forward",
        f"pod/{pod.metadata.name}",
        ":8000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert forward.stdout is not None
        line = (await asyncio.wait_for(forward.stdout.readline(), 30)).decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        port = int(line.split("127.0.0.1:", 1)[1].split()[0])
        response = httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert response.status_code == 200, response.text
    finally:
        forward.terminate()
        await forward.wait()


async def test_a_killed_container_is_restarted_by_the_kubelet_and_the_agent_recovers(shared: World) -> None:
    world = shared
    pod = world.ready_pod("researcher")
    assert pod is not None
    status = pod.status.containerStatuses[0]
    restarts = status.restartCount  # another test may have killed it before: count from here
    pid = world.node.container_pid(status.containerID)
    assert "pallas agent" in cmdline(pid)
    os.kill(pid, signal.SIGKILL)

    def restarted() -> Pod | None:
        current = world.ready_pod("researcher")
        if current is None or current.status.containerStatuses[0].restartCount != restarts + 1:
            return None
        return current

    again = await world.until(
        f"the researcher's container restarted (restartCount {restarts + 1}) and Ready",
        restarted,
        FOLLOW_WITHIN,
    )
    assert again.metadata.uid == pod.metadata.uid, "the same pod, restarted in place"
    assert again.status.containerStatuses[0].lastState.terminated.exitCode == 137
    assert again.status.containerStatuses[0].containerID != status.containerID
    for name in ("researcher", "orchestrator"):
        await world.until(
            f"agent {name} Ready after the restart", lambda n=name: world.agent_ready(n), FOLLOW_WITHIN
        )
    # The new process serves: health by its Service name, and a turn through the orchestrator.
    async with mcp_client(world.agent_url("orchestrator")) as client:
        result = await client.call_tool("send_message", {"message": "again?"})
    assert result.content[0].text.startswith("Final answer: echo saw [redacted]"), result


async def test_a_deleted_pod_is_replaced_and_the_registry_follows(shared: World) -> None:
    world = shared
    old = world.ready_pod("researcher")
    assert old is not None
    world.kubectl("delete", "pod", old.metadata.name, "--wait=false")

    def replaced() -> Pod | None:
        pod = world.ready_pod("researcher")
        return pod if pod is not None and pod.metadata.uid != old.metadata.uid else None

    new = await world.until(
        "a new researcher pod from the ReplicaSet, Running and Ready", replaced, FOLLOW_WITHIN
    )
    assert new.metadata.ownerReferences[0].kind == "ReplicaSet"
    await world.until("the researcher Ready again", lambda: world.agent_ready("researcher"), FOLLOW_WITHIN)

    # The registry pod too: its replacement serves the same catalogue under the same name.
    registry = world.ready_registry_pod()
    assert registry is not None
    world.kubectl("delete", "pod", registry.metadata.name, "--wait=false")

    def new_registry_serving() -> dict[str, dict[str, Any]] | None:
        pod = world.ready_registry_pod()
        if pod is None or pod.metadata.uid == registry.metadata.uid:
            return None
        catalogue = world.catalogue()
        if catalogue is None or sorted(catalogue) != sorted(AGENTS):
            return None
        ready = all(e["_meta"]["dev.pallas/agent"]["phase"] == "Ready" for e in catalogue.values())
        return catalogue if ready else None

    await world.until(
        "a new registry pod serving all three agents as Ready over cluster DNS",
        new_registry_serving,
        FOLLOW_WITHIN,
    )
    async with mcp_client(world.agent_url("orchestrator")) as client:
        result = await client.call_tool("send_message", {"message": "after the new pods?"})
    assert result.content[0].text.startswith("Final answer: echo saw [redacted]"), result


def kube_proxy_programming() -> tuple[float, float]:
    """kube-proxy's network programming latency so far: (sum of seconds, count of changes)."""
    text = httpx2.get("http://127.0.0.1:10249/metrics", timeout=5).text
    found = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("kubeproxy_network_programming_duration_seconds_") and not s.labels.get("le")
    }
    return (
        found.get("kubeproxy_network_programming_duration_seconds_sum", 0.0),
        found.get("kubeproxy_network_programming_duration_seconds_count", 0.0),
    )


async def test_a_rollout_lets_the_turn_in_flight_finish_and_never_refuses_a_new_client(shared: World) -> None:
    world = shared
    old = world.ready_pod("summarizer")
    assert old is not None
    url = world.agent_url("summarizer")
    llm = world.servers.llm
    asked_before = len(llm.requests)
    programmed_before = kube_proxy_programming()
    async with mcp_client(url) as client:
        await client.list_tools()  # as clients do; else the SDK lists them after the answer
        turn = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "slowly, please"}))
        await world.until(
            "the summarizer's model asked the slow question",
            lambda: any("slowly" in json.dumps(r.json) for r in llm.requests[asked_before:]),
            30,
        )
        started = asyncio.get_running_loop().time()
        world.kubectl("rollout", "restart", "deployment/summarizer")

        # New clients all through the rollout: each opens a session and is answered.
        refused: list[str] = []
        answered = 0

        async def old_pod_gone() -> bool:
            nonlocal answered
            try:
                async with mcp_client(url) as probe:
                    await probe.call_tool("get_health", {})
                answered += 1
            except Exception as exc:  # every failure of a new client is what this test counts
                refused.append(f"{type(exc).__name__}: {exc}")
            return all(p.metadata.uid != old.metadata.uid for p in world.all_pods("summarizer"))

        await world.until("the old summarizer pod gone", old_pod_gone, FOLLOW_WITHIN, interval=0.3)
        gone_after = asyncio.get_running_loop().time() - started
        result = await asyncio.wait_for(turn, 30)
    programmed = [a - b for a, b in zip(kube_proxy_programming(), programmed_before, strict=True)]
    print(
        f"rollout: old pod gone {gone_after:.1f}s after the restart; {answered} new clients answered, "
        f"{len(refused)} refused; kube-proxy programmed {programmed[1]:.0f} endpoint changes in "
        f"{programmed[0] / max(programmed[1], 1):.2f}s on average"
    )
    assert (result.is_error, result.content[0].text) == (False, "A slow summary.")
    assert refused == []
    assert answered >= 5
    # The old pod waited for its turn: the preStop pause, then the drain until the answer.
    assert gone_after >= SLOW_TURN_SECONDS - 5, f"the old pod went after {gone_after:.1f}s"
    await world.until("the summarizer Ready again", lambda: world.agent_ready("summarizer"), FOLLOW_WITHIN)
    deployment = world.kube.get(Deployment, "summarizer", namespace=world.namespace)
    assert deployment.spec.strategy.rollingUpdate.maxUnavailable == 0


async def test_a_stopped_downstream_server_shows_as_degraded_health(
    world: World, degrading: Degrading
) -> None:
    team = degrading.team
    researcher, orchestrator = team.agent("researcher"), team.agent("orchestrator")
    await until_team_ready(world, team)
    degrading.stop_everything.close()  # its server-everything stops: the researcher's probe fails

    def degraded() -> dict[str, Any] | None:
        obj = world.agent(researcher)
        health = ((obj or {}).get("status") or {}).get("health") or {}
        return obj if health.get("status") == "degraded" else None

    obj = await world.until(
        "the researcher's status.health degraded (get_health polled every 5 s)", degraded, FOLLOW_WITHIN
    )
    status = obj["status"]
    assert "everything" in status["health"]["message"], status["health"]
    await world.until(
        "the researcher's phase Degraded", lambda: world.agent_ready(researcher, "Degraded"), FOLLOW_WITHIN
    )
    obj = world.agent(researcher)
    assert condition(obj, "Healthy") == ("False", "HealthDegraded")
    assert condition(obj, "Ready")[0] == "True", "degraded health keeps the agent Ready (it still serves)"

    def catalogued_degraded() -> dict[str, Any] | None:
        catalogue = world.catalogue(team=team) or {}
        entry = catalogue.get(researcher)
        if entry is None:
            return None
        live = entry["_meta"]["dev.pallas/agent"]
        return entry if live["health"]["status"] == "degraded" and live["phase"] == "Degraded" else None

    entry = await world.until(
        "the registry entry of the researcher showing degraded health", catalogued_degraded, REGISTRY_WITHIN
    )
    assert "everything" in entry["_meta"]["dev.pallas/agent"]["health"]["message"]
    assert entry["_meta"]["io.modelcontextprotocol.registry/official"]["status"] == "active"
    # The orchestrator's own downstream (the researcher) still answers: it stays healthy.
    assert world.agent_ready(orchestrator) is not None, "the orchestrator should stay Ready"
    scraped = scrape(world.metrics_url(researcher))
    assert sample(scraped, "pallas_downstream_up", agent=researcher, server="everything") == 0
    assert sample(scraped, "pallas_agent_health_status", agent=researcher) == 0.5


@pytest.mark.timeout(420)  # team start-up, then up to ROTATION_WITHIN for the kubelet's sync
async def test_a_rotated_llm_key_reaches_the_llm_without_a_new_pod(world: World, rotating: Team) -> None:
    team = rotating
    await until_team_ready(world, team)
    llm = world.servers.llm
    hashes = {name: world.config_hash(name) for name in team.agents}
    pods = {name: world.ready_pod(name) for name in team.agents}
    kubectl_apply(
        world.cluster,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": team.secret, "namespace": world.namespace},
            "stringData": {"OPENAI_API_KEY": SECOND_KEY},
        },
    )
    asked = 0

    async def turn_with_the_new_key() -> list[RecordedRequest] | None:
        # The kubelet writes each pod's Secret volume at its next sync of that pod (up to 90 s);
        # each turn reads the key file again. Until both pods have it, a turn carries the old key.
        nonlocal asked
        asked += 1
        before = len(llm.requests)
        async with mcp_client(world.agent_url(team.agent("orchestrator"))) as client:
            result = await client.call_tool("send_message", {"message": f"with the new key? ({asked})"})
        assert "echo saw [redacted]" in result.content[0].text, result
        turn = [r for r in llm.requests[before:] if r.path == llm.completion_path]
        sent = {r.headers.get("authorization") for r in turn}
        return turn if sent == {f"Bearer {SECOND_KEY}"} else None

    turn = await world.until(
        "a turn of the orchestrator and its researcher sending only the rotated key",
        turn_with_the_new_key,
        ROTATION_WITHIN,
        interval=3,
    )
    assert {system_of(r) for r in turn} == {ORCHESTRATOR, RESEARCHER}
    for name in team.agents:
        assert world.config_hash(name) == hashes[name], f"{name}'s pod template changed"
        now = world.ready_pod(name)
        assert now is not None
        assert now.metadata.uid == pods[name].metadata.uid, f"{name} got a new pod"  # type: ignore[union-attr]
        assert all(c.restartCount == 0 for c in now.status.containerStatuses or [])  # type: ignore[union-attr]
    assert world.team_ready(team)


async def test_an_instruction_patched_during_a_turn_is_served_next_by_the_same_pod(
    world: World, live: Team
) -> None:
    team = live
    await until_team_ready(world, team)
    agent = team.agent("summarizer")
    pod = world.ready_pod(agent)
    assert pod is not None
    template = world.config_hash(agent)
    first = (world.agent(agent) or {})["status"]
    llm = world.servers.llm
    release = world.servers.loop.run(_new_event())
    llm.script(Hold(release, then=Text("the held answer")))
    before = len(llm.requests)
    async with mcp_client(world.agent_url(agent)) as client:
        turn = asyncio.create_task(client.call_tool("send_message", {"message": "take your time"}))
        await world.until("the turn's LLM call held at the fake LLM", lambda: llm.holding >= 1, FOLLOW_WITHIN)
        patched_at = asyncio.get_running_loop().time()
        world.kubectl(
            "patch", "pallasagent", agent, "--type=merge", "-p", json.dumps({"spec": {"instruction": EDITED}})
        )

        def serving_the_edit() -> dict[str, Any] | None:
            status = (world.agent(agent) or {}).get("status") or {}
            edited = status.get("configHash") not in (None, first["configHash"])
            return status if edited and status.get("servedConfigHash") == status["configHash"] else None

        await world.until("status: the pod serves the patched config", serving_the_edit, FOLLOW_WITHIN)
        took = asyncio.get_running_loop().time() - patched_at
        print(f"kubectl patch -> servedConfigHash of the new config: {took:.1f} s")
        world.servers.loop.loop.call_soon_threadsafe(release.set)
        held = await turn
        assert held.content[0].text == "the held answer", held  # finished, not "shutting down"
        after = await client.call_tool("send_message", {"message": "and now?"})
        assert after.content[0].text == "A summary.", after
    turns = [r for r in llm.requests[before:] if r.path == llm.completion_path]
    assert [system_of(r) for r in turns] == [SUMMARIZER, EDITED]
    now = world.ready_pod(agent)
    assert now is not None
    assert now.metadata.uid == pod.metadata.uid, "the pod was replaced"  # type: ignore[union-attr]
    assert all(c.restartCount == 0 for c in now.status.containerStatuses or [])  # type: ignore[union-attr]
    assert world.config_hash(agent) == template, "the pod template changed"
    assert (world.agent(agent) or {})["status"]["phase"] == "Ready"


async def _new_event() -> asyncio.Event:
    return asyncio.Event()


async def test_a_deleted_agent_is_garbage_collected_and_leaves_the_catalogue(
    world: World, shrinking: Team
) -> None:
    team = shrinking
    summarizer, kept = team.agent("summarizer"), team.agent("researcher")
    await until_team_ready(world, team)
    pod = world.ready_pod(summarizer)
    assert pod is not None
    pid = world.node.container_pid(pod.status.containerStatuses[0].containerID)
    was = cmdline(pid)
    assert "pallas agent" in was
    world.cluster.kubectl("delete", "pallasagent", summarizer, "-n", world.namespace, "--wait=false")

    def children_gone() -> bool:
        for kind, name in (
            (Deployment, summarizer),
            (Service, summarizer),
            (ConfigMap, f"{summarizer}-config"),
        ):
            try:
                world.kube.get(kind, name, namespace=world.namespace)
                return False
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        return True

    await world.until(
        "the summarizer's Deployment, Service and ConfigMap garbage-collected",
        children_gone,
        GC_WITHIN,
        interval=0.5,
    )
    await world.until("the summarizer's pod gone", lambda: not world.all_pods(summarizer), FOLLOW_WITHIN)
    assert process_gone(pid, was), "the summarizer's container process was stopped"
    catalogue = await world.until(
        "the registry no longer listing the summarizer",
        lambda: (c := world.catalogue(team=team)) is not None and summarizer not in c and c,
        REGISTRY_WITHIN,
    )
    assert sorted(catalogue) == [kept]
    tombstones = world.catalogue("?include_deleted=true", team=team) or {}
    assert tombstones[summarizer]["_meta"]["io.modelcontextprotocol.registry/official"]["status"] == "deleted"
    await world.until(
        f"the PallasDeployment {team.deployment} counting 1 agent",
        lambda: world.deployment_status(team).get("agents", {}).get("total") == 1,
        FOLLOW_WITHIN,
    )


@pytest.mark.timeout(300)
async def test_a_delegation_through_pods_is_one_trace_in_jaeger(
    world: World, traced: tuple[Team, Jaeger]
) -> None:
    team, jaeger = traced
    await until_team_ready(world, team)
    orchestrator, researcher = team.agent("orchestrator"), team.agent("researcher")
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    async with mcp_client(world.agent_url(orchestrator)) as client:
        result = await client.call_tool(
            "send_message",
            {"message": "what is new?"},
            meta={"traceparent": f"00-{trace_id}-{caller_span}-01"},
        )
    assert text_of([c.model_dump() for c in result.content]).startswith("Final answer:")

    def whole(trace: dict[str, Any]) -> bool:
        names = [s["operationName"] for s in trace["spans"]]
        return (
            trace["traceID"] == trace_id
            and names.count("invoke_agent " + orchestrator) == 1
            and "execute_tool echo" in names  # everything's echo tool
            and names.count(f"chat {MODEL}") == 4
        )

    trace = await jaeger.wait_for_trace(orchestrator, whole, within=60)
    services = {p["serviceName"] for p in trace["processes"].values()}
    assert services == {orchestrator, researcher}
    spans = {s["spanID"]: s for s in trace["spans"]}
    service_of = {s["spanID"]: trace["processes"][s["processID"]]["serviceName"] for s in trace["spans"]}
    [root] = [s for s in trace["spans"] if parent_of(s) not in spans]
    assert parent_of(root) == caller_span  # the caller's traceparent, continued
    assert service_of[root["spanID"]] == orchestrator

    # From the researcher's call of everything's echo tool up to the orchestrator's server span, one chain
    # crossing the pods: researcher's spans first, the orchestrator's after.
    [tool_span] = [s for s in trace["spans"] if s["operationName"] == "execute_tool echo"]
    chain, span = [], tool_span
    while span is not None:
        chain.append((service_of[span["spanID"]], span["operationName"]))
        span = spans.get(parent_of(span) or "")
    assert chain == [
        (researcher, "execute_tool echo"),
        (researcher, "invoke_agent " + researcher),
        (researcher, "tools/call send_message"),
        (orchestrator, "MCP send tools/call send_message"),
        (orchestrator, "invoke_agent " + researcher),
        (orchestrator, "invoke_agent " + orchestrator),
        (orchestrator, "tools/call send_message"),
    ]
    assert tags(tool_span)["pallas.mcp.server"] == "everything"
    for chat in (s for s in trace["spans"] if s["operationName"] == f"chat {MODEL}"):
        assert tags(chat)["gen_ai.request.model"] == MODEL
        assert tags(chat)["gen_ai.usage.output_tokens"] > 0
    process = tags(next(iter(trace["processes"].values())))
    assert process["k8s.namespace.name"] == world.namespace
    assert process["pallas.deployment"] == team.deployment
    assert FIRST_KEY not in json.dumps(trace)
    assert BEARER.split()[1] not in json.dumps(trace)
