"""The whole product, end to end, on the local control plane with the development stand-in kubelet.

`kubectl apply` of a Secret, a PallasDeployment and three PallasAgents → the operator (a
`pallas operator` process, no service-host map) → agent and registry pods, run as local
processes by hack/dev-kubelet on a node of this module's own, Service names in /etc/hosts →
the registry over cluster DNS → a client that finds the orchestrator in the catalogue and talks
to it with a bearer and a progress token → the orchestrator asks the researcher agent, which uses
server-everything and two header-echo MCP servers (`echo` with forwardInboundAuth, `plain`
without) → the answer, progress in the seed's formats, the history prompt and the metrics.
Then the drills, each followed by status, health, catalogue and pods within a bound: a killed
agent process, a downstream server stopped, a rotated LLM key, a deleted agent.

The tests run in file order and share one module-scoped world: each builds on the state the
previous one left. The fake LLM (OpenAI wire format) decides by the system prompt who is asking.
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
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from lightkube import ApiError
from lightkube import Client as KubeClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod, Service

from pallas_api.kube import PallasAgent, PallasDeployment
from tests.support.cluster import LocalCluster
from tests.support.e2e import (
    PALLAS,
    DevKubeletProcess,
    LoopThread,
    OperatorProcess,
    create_namespace,
    delete_namespace,
    sample,
    scrape,
    start_dev_kubelet,
    start_operator,
    until,
)
from tests.support.fake_llm import Call, FakeOpenAI, RecordedRequest, Text, ToolCalls
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

RESEARCH_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("echo__echo_headers", {"delay": 0}),
    ("plain__echo_headers", {"delay": 0}),
    ("everything__echo", {"message": "hello from the researcher"}),
    # Reports progress (no message) twice: relayed by the researcher, then by the orchestrator.
    ("everything__trigger-long-running-operation", {"duration": 0.4, "steps": 2}),
)

# Bounds of the waits (seconds). Pod start-up is a Python process import (~3 s on two cores).
READY_WITHIN = 90
FOLLOW_WITHIN = 45
GC_WITHIN = 60
REGISTRY_WITHIN = 15


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


def decide(body: dict[str, Any]) -> Text | ToolCalls:
    """Who is asking is told by the system prompt; what to do next by the last message."""
    messages = body["messages"]
    system = text_of(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""
    last = messages[-1]
    offered = {tool["function"]["name"] for tool in body.get("tools") or []}
    if system == ORCHESTRATOR:
        if last["role"] == "user":
            question = text_of(last["content"])
            return ToolCalls([Call("researcher__send_message", {"message": f"research: {question}"})])
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
    return Text("A summary.")


def cmdline(pid: int) -> str:
    """A process's command line ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def system_of(request: RecordedRequest) -> str:
    messages = (request.json or {}).get("messages") or [{}]
    return text_of(messages[0].get("content")) if messages[0].get("role") == "system" else ""


# --- the world ------------------------------------------------------------------------------


@dataclass
class Servers:
    """What the agents talk to, all on 127.0.0.1 (pods are host processes and reach it)."""

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
    kubelet: DevKubeletProcess
    operator: OperatorProcess
    servers: Servers
    kube: KubeClient

    # addresses

    def agent_url(self, agent: str) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/mcp"

    def metrics_url(self, agent: str) -> str:
        return f"http://{agent}.{self.namespace}.svc.cluster.local:8000/metrics"

    @property
    def registry_base(self) -> str:
        return f"http://{DEPLOYMENT}-registry.{self.namespace}.svc.cluster.local:8080"

    @property
    def catalogue_url(self) -> str:
        return f"{self.registry_base}/.well-known/mcp/server.json"

    # reads

    def agent(self, name: str) -> dict[str, Any] | None:
        try:
            return self.kube.get(PallasAgent, name, namespace=self.namespace).to_dict()
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def deployment_status(self) -> dict[str, Any]:
        obj = self.kube.get(PallasDeployment, DEPLOYMENT, namespace=self.namespace).to_dict()
        return dict(obj.get("status") or {})

    def all_pods(self, agent: str) -> list[Pod]:
        labels = {"pallas.dev/agent": agent}
        return list(self.kube.list(Pod, namespace=self.namespace, labels=labels))

    def ready_pod(self, agent: str) -> Pod | None:
        """The agent's one pod, if it is Running and Ready (and no other pod of it exists)."""
        pods = self.all_pods(agent)
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

    def catalogue(self, query: str = "") -> dict[str, dict[str, Any]] | None:
        """Agent id → catalogue entry (None while the registry does not answer 200)."""
        try:
            response = httpx2.get(self.catalogue_url + query, timeout=5)
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

    def diagnose(self) -> str:
        """What the cluster, the operator, the stand-in kubelet and the pods say (for failures)."""
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
        for agent in AGENTS:
            obj = self.agent(agent)
            if obj is not None:
                parts.append(f"--- {agent} status: {json.dumps(obj.get('status'), sort_keys=True)}")
            for pod in self.all_pods(agent):
                log = self.kubelet.pod_log(self.namespace, pod.metadata.name, "agent", 12)
                parts.append(f"--- pod {pod.metadata.name} log:\n{log}")
        parts.append(f"--- operator log:\n{self.operator.log_tail(25)}")
        parts.append(f"--- dev-kubelet log:\n{self.kubelet.log_tail(25)}")
        return "\n".join(parts)

    async def until(self, what: str, probe: Any, within: float, interval: float = 0.25) -> Any:
        return await until(what, probe, within, interval=interval, diagnose=self.diagnose)


def manifests(namespace: str, node: str, servers: Servers) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    pinned = {"nodeSelector": {"kubernetes.io/hostname": node}}

    def agent(name: str, instruction: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": name, **meta},
            "spec": {
                "deployment": DEPLOYMENT,
                "description": f"The e2e {name}",
                "instruction": instruction,
                "pod": pinned,
                **spec,
            },
        }

    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, **meta},
            "stringData": {"OPENAI_API_KEY": FIRST_KEY},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasDeployment",
            "metadata": {"name": DEPLOYMENT, **meta},
            "spec": {
                "model": {"default": f"llm.{MODEL}"},
                "providers": {
                    "llm": {
                        "type": "openai",
                        "baseURL": servers.llm.base_url,
                        "apiKey": {"secretKeyRef": {"name": SECRET, "key": "OPENAI_API_KEY"}},
                        "timeoutSeconds": 30,
                        "maxRetries": 1,
                    }
                },
                "mcpServers": {
                    "everything": {"url": servers.everything.url, "timeoutSeconds": 20},
                    "echo": {"url": servers.echo.url, "forwardInboundAuth": True},
                    "plain": {"url": servers.plain.url},
                },
                "registry": {"enabled": True, "port": 8080},
                "healthCheck": {"intervalSeconds": 5, "timeoutSeconds": 2},
                "runtime": {"env": [{"name": "FASTMCP_CHECK_FOR_UPDATES", "value": "off"}]},
            },
        },
        agent("researcher", RESEARCHER, servers=["everything", "echo", "plain"], capabilities=["research"]),
        agent("orchestrator", ORCHESTRATOR, agents=["researcher"]),
        agent("summarizer", SUMMARIZER),
    ]


@pytest.fixture(scope="module")
def e2e_servers(mcp_peers: McpPeers) -> Iterator[Servers]:
    loop = LoopThread()
    stop_everything = contextlib.ExitStack()
    try:
        llm = loop.enter(FakeOpenAI(default=decide, models=[MODEL]))
        echo = loop.enter(header_echo_server())
        plain = loop.enter(header_echo_server())
        everything = stop_everything.enter_context(run_server_everything(mcp_peers))
        yield Servers(loop, llm, echo, plain, everything, stop_everything)
    finally:
        stop_everything.close()
        loop.close()


@pytest.fixture(scope="module")
def e2e_kubelet(
    kube_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevKubeletProcess]:
    suffix = secrets.token_hex(3)
    # Its own /24 in 127.2.0.0/16: away from the demo's and the dev-kubelet tests' 127.1.0.0/16.
    cidr = f"127.2.{secrets.randbelow(250) + 1}.0/24"
    kubelet = start_dev_kubelet(kube_cluster, tmp_path_factory.mktemp("e2e"), f"pallas-e2e-{suffix}", cidr)
    try:
        yield kubelet
    finally:
        kubelet.stop()


@pytest.fixture(scope="module")
def e2e_namespace(pallas_crds: LocalCluster, e2e_kubelet: DevKubeletProcess) -> Iterator[str]:
    """A namespace for the module; deleted, and waited for, while the stand-in kubelet still runs."""
    name = f"t-e2e-{secrets.token_hex(3)}"
    create_namespace(pallas_crds, name)
    try:
        yield name
    finally:
        delete_namespace(pallas_crds, name)


@pytest.fixture(scope="module")
def e2e_operator(
    pallas_crds: LocalCluster, e2e_namespace: str, e2e_kubelet: DevKubeletProcess
) -> Iterator[OperatorProcess]:
    operator = start_operator(pallas_crds, e2e_namespace, e2e_kubelet.log.parent)
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture(scope="module")
def world(
    e2e_servers: Servers,
    pallas_crds: LocalCluster,
    e2e_kubelet: DevKubeletProcess,
    e2e_namespace: str,
    e2e_operator: OperatorProcess,
) -> Iterator[World]:
    kube = KubeClient(config=pallas_crds.config(), field_manager="pallas-tests")
    try:
        kubectl_apply(pallas_crds, *manifests(e2e_namespace, e2e_kubelet.node, e2e_servers))
        yield World(pallas_crds, e2e_namespace, e2e_kubelet, e2e_operator, e2e_servers, kube)
    finally:
        kube.close()


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
        assert pod.spec.nodeName == world.kubelet.node, "agent pods run on this module's stand-in node"
        assert pod.status.containerStatuses[0].containerID.startswith("devkubelet://")

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
    assert deployment["registryURL"] == world.catalogue_url

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


async def test_a_client_finds_the_orchestrator_in_the_registry_and_chats(world: World) -> None:
    llm, echo, plain = world.servers.llm, world.servers.echo, world.servers.plain
    catalogue = world.catalogue()
    assert catalogue is not None, "the registry does not answer"
    url = catalogue["orchestrator"]["server"]["remotes"][0]["url"]
    assert url == world.agent_url("orchestrator")
    llm_before = len(llm.requests)
    echo_before, plain_before = len(echo.requests), len(plain.requests)

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    question = "Who wrote The Republic?"
    async with mcp_client(url) as client:
        health = json.loads((await client.call_tool("get_health", {})).content[0].text)
        assert health["status"] == "ok", health
        result = await client.call_tool(
            "send_message",
            {"message": question, "conversation_id": "e2e-chat"},
            progress_handler=on_progress,
        )
        answer = result.content[0].text
        history = await client.get_prompt("orchestrator_history", {"conversation_id": "e2e-chat"})

    # The answer went orchestrator → researcher → tools and back, with the bearer only at `echo`.
    assert not result.is_error, answer
    assert answer.startswith("Final answer: echo saw Bearer e2e-user-token; plain saw None; "), answer
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
    assert (0, None, "researcher/send_message: started") in progress
    assert (1, 1, "researcher/send_message: completed") in progress

    # The conversation is in the orchestrator's history prompt.
    turns = [(m.role, m.content.text) for m in history.messages]
    assert turns == [("user", question), ("assistant", answer)]

    # What the LLM saw: the bearer reached `echo` (forwardInboundAuth) and not `plain`.
    seen = [r for r in llm.requests[llm_before:] if r.path == llm.completion_path]
    research = [r for r in seen if system_of(r) == RESEARCHER]
    assert len(research) == 2, [system_of(r) for r in seen]
    offered = {t["function"]["name"] for t in research[0].json["tools"]}
    assert {n for n, _ in RESEARCH_CALLS} <= offered, offered
    results = last_round_results(research[1].json["messages"])
    assert authorization_in(results["echo__echo_headers"]) == BEARER
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
    assert sample(researcher, "pallas_send_message_total", agent="researcher", outcome="ok") == 1
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
        world.registry_base,
        "orchestrator",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(chat.communicate(), 90)
    assert chat.returncode == 0, err.decode()
    assert out.decode().startswith("Final answer: echo saw Bearer e2e-user-token; plain saw None"), out
    assert "researcher/send_message" in err.decode(), "pallas chat shows progress lines while waiting"


async def test_a_killed_agent_process_is_restarted_and_the_agent_is_ready_again(world: World) -> None:
    pod = world.ready_pod("researcher")
    assert pod is not None
    status = pod.status.containerStatuses[0]
    assert status.restartCount == 0
    pid = int(status.containerID.removeprefix("devkubelet://"))
    assert "pallas agent" in cmdline(pid)
    os.kill(pid, signal.SIGKILL)

    def restarted() -> Pod | None:
        current = world.ready_pod("researcher")
        if current is None or current.status.containerStatuses[0].restartCount != 1:
            return None
        return current

    again = await world.until(
        "the researcher's container restarted (restartCount 1) and Ready", restarted, FOLLOW_WITHIN
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
    assert result.content[0].text.startswith("Final answer: echo saw Bearer e2e-user-token"), result


async def test_a_stopped_downstream_server_shows_as_degraded_health(world: World) -> None:
    world.servers.stop_everything.close()  # server-everything stops: the researcher's probe fails

    def degraded() -> dict[str, Any] | None:
        obj = world.agent("researcher")
        health = ((obj or {}).get("status") or {}).get("health") or {}
        return obj if health.get("status") == "degraded" else None

    obj = await world.until(
        "the researcher's status.health degraded (get_health polled every 5 s)", degraded, FOLLOW_WITHIN
    )
    status = obj["status"]
    assert "everything" in status["health"]["message"], status["health"]
    await world.until(
        "the researcher's phase Degraded", lambda: world.agent_ready("researcher", "Degraded"), FOLLOW_WITHIN
    )
    obj = world.agent("researcher")
    assert condition(obj, "Healthy") == ("False", "HealthDegraded")
    assert condition(obj, "Ready")[0] == "True", "degraded health keeps the agent Ready (it still serves)"

    def catalogued_degraded() -> dict[str, Any] | None:
        catalogue = world.catalogue() or {}
        entry = catalogue.get("researcher")
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
    orchestrator = world.agent_ready("orchestrator")
    assert orchestrator is not None, "the orchestrator should stay Ready"
    researcher = scrape(world.metrics_url("researcher"))
    assert sample(researcher, "pallas_downstream_up", agent="researcher", server="everything") == 0
    assert sample(researcher, "pallas_agent_health_status", agent="researcher") == 0.5


async def test_a_rotated_llm_key_rolls_the_pods_and_reaches_the_llm(world: World) -> None:
    llm = world.servers.llm
    rolled = AGENTS  # all three read the same key
    hashes = {name: world.config_hash(name) for name in rolled}
    old_pods = {name: {p.metadata.uid for p in world.all_pods(name)} for name in rolled}
    llm_before = len(llm.requests)
    kubectl_apply(
        world.cluster,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": world.namespace},
            "stringData": {"OPENAI_API_KEY": SECOND_KEY},
        },
    )
    for name in rolled:
        await world.until(
            f"{name}'s pod-template config-hash changing",
            lambda n=name: world.config_hash(n) != hashes[n],
            FOLLOW_WITHIN,
        )

        def new_pod_ready(n: str = name) -> Pod | None:
            pod = world.ready_pod(n)  # the only pod of the agent: the old one is gone
            return pod if pod is not None and pod.metadata.uid not in old_pods[n] else None

        await world.until(
            f"a new {name} pod Running and Ready, the old one gone", new_pod_ready, FOLLOW_WITHIN
        )

    def new_key_seen() -> bool:
        return any(
            r.headers.get("authorization") == f"Bearer {SECOND_KEY}" for r in llm.requests[llm_before:]
        )

    await world.until("the fake LLM receiving the rotated key", new_key_seen, FOLLOW_WITHIN)
    await world.until(
        "the orchestrator Ready after the rollout", lambda: world.agent_ready("orchestrator"), FOLLOW_WITHIN
    )
    await world.until(
        "the researcher Available and Verified after the rollout (phase Degraded: everything is down)",
        lambda: world.agent_ready("researcher", "Degraded"),
        FOLLOW_WITHIN,
    )
    # A turn now goes out with the new key only.
    before_turn = len(llm.requests)
    async with mcp_client(world.agent_url("orchestrator")) as client:
        result = await client.call_tool("send_message", {"message": "with the new key?"})
    assert "echo saw Bearer e2e-user-token" in result.content[0].text, result
    turn = [r for r in llm.requests[before_turn:] if r.path == llm.completion_path]
    assert {system_of(r) for r in turn} == {ORCHESTRATOR, RESEARCHER}
    assert {r.headers.get("authorization") for r in turn} == {f"Bearer {SECOND_KEY}"}


async def test_a_deleted_agent_is_garbage_collected_and_leaves_the_catalogue(world: World) -> None:
    pod = world.ready_pod("summarizer")
    assert pod is not None
    pid = int(pod.status.containerStatuses[0].containerID.removeprefix("devkubelet://"))
    world.cluster.kubectl("delete", "pallasagent", "summarizer", "-n", world.namespace, "--wait=false")

    def children_gone() -> bool:
        for kind, name in (
            (Deployment, "summarizer"),
            (Service, "summarizer"),
            (ConfigMap, "summarizer-config"),
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
    await world.until("the summarizer's pod gone", lambda: not world.all_pods("summarizer"), FOLLOW_WITHIN)
    assert not cmdline(pid), "the summarizer's process was stopped"
    catalogue = await world.until(
        "the registry no longer listing the summarizer",
        lambda: (c := world.catalogue()) is not None and "summarizer" not in c and c,
        REGISTRY_WITHIN,
    )
    assert sorted(catalogue) == ["orchestrator", "researcher"]
    tombstones = world.catalogue("?include_deleted=true") or {}
    assert (
        tombstones["summarizer"]["_meta"]["io.modelcontextprotocol.registry/official"]["status"] == "deleted"
    )
    await world.until(
        "the PallasDeployment counting 2 agents",
        lambda: world.deployment_status().get("agents", {}).get("total") == 2,
        FOLLOW_WITHIN,
    )
