"""The product's consumers, for real, on the local node: a Prometheus Operator, NetworkPolicy, a client pod.

- **Monitoring.** `hack/local/monitoring up` runs a Prometheus Operator (built from its Go
  module) and a `Prometheus` that selects ServiceMonitors and PrometheusRules labelled
  `prometheus: pallas` in every namespace. The chart is installed with its operator
  ServiceMonitor and its PrometheusRule so labelled (`prometheusRule.alertFor` shortens the `for`
  of the error-rate alert to 0 s: the expression is the chart's); the team's PallasDeployment
  asks for ServiceMonitors with the label. The operator-generated configuration (pod discovery
  through the Services' endpoints, the port and relabelling the ServiceMonitors declare) must
  find every agent, the registry and the operator `up`; `pallas_send_message_total` must move
  when a message is sent; failing turns must fire PallasAgentErrorRateHigh from the
  PrometheusRule; every query of the chart's Grafana dashboard must return data.
- **NetworkPolicy** (`spec.network.policy`, enforced by kube-network-policies on the node): a pod
  of another namespace cannot open a connection to an agent (yet reaches the registry, which the
  policy does not cover); the pods the policy names (`allowFrom`: a client pod, Prometheus), the
  deployment's registry and its operator can; peers call each other (the orchestrator asks the
  researcher) and the operator verifies and health-checks the agents through it.
- **A client in a pod**, as Daedalus is one (seed 001): from another namespace, the image's
  `pallas chat -m … --registry http://<deployment>-registry.<ns>.svc.cluster.local:8080
  orchestrator` resolves the registry by cluster DNS, reads the catalogue, picks the agent from
  it and prints the answer, the progress on the way.

No test depends on another having run: the module's world (stack, operator, team, client pods)
is built by fixtures, and so is the traffic the monitoring tests read (`traffic`). The fake LLM
and the downstream MCP servers listen on the node's bridge address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.support.cluster import REPO, LocalCluster
from tests.support.e2e import (
    LocalNode,
    LoopThread,
    OperatorRelease,
    create_namespace,
    delete_namespace,
    install_operator,
    local_node,
    until,
    wait_for,
)
from tests.support.fake_llm import Call, FakeOpenAI, FakeUsage, HttpError, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, error_server, header_echo_server
from tests.support.operator import condition, kubectl_apply

pytestmark = pytest.mark.timeout(600)

MONITORING = REPO / "hack" / "local" / "monitoring"
DASHBOARD = REPO / "charts" / "pallas" / "files" / "dashboards" / "pallas-overview.json"
PROMETHEUS_NAMESPACE = "pallas-monitoring"
PROMETHEUS = "pallas"
"""The `Prometheus` object hack/local/monitoring makes."""
SELECTED = {"prometheus": "pallas"}
"""The label the local Prometheus selects ServiceMonitors and PrometheusRules by."""
PROMETHEUS_PODS = {"app.kubernetes.io/name": "prometheus"}
CLIENT_LABELS = {"pallas.dev/client": "true"}

DEPLOYMENT = "watched"
AGENTS = ("researcher", "orchestrator")
MODEL = "fake-model"
ORCHESTRATOR = "You are the orchestrator: ask the researcher, then answer the user."
RESEARCHER = "You are the researcher: use your tools, then report."
FAIL = "please fail"
"""A message with this makes the LLM answer 500 (a failed send_message)."""
USAGE = FakeUsage(input=20, output=5, cache_read=8)
"""Cache reads too, so the dashboard's cache-hit panel has data."""
RESEARCH_CALLS = (
    Call("tools__echo_headers", {"delay": 0}),
    Call("errors__fail", {"message": "expected"}),  # an error result (pallas_tool_calls_total error)
    Call("secret__echo_headers", {"delay": 0}),  # denied by spec.tools (pallas_tool_denied_total)
)
READY_WITHIN = 120
SCRAPED_WITHIN = 90
"""Prometheus scrapes and evaluates every 5 s: a series or an alert of a known target shows in
seconds."""
CONFIGURED_WITHIN = 240
"""A new ServiceMonitor becomes targets once the Prometheus Operator has rewritten its Secret, the
kubelet has copied the Secret into the pod (next pod sync: 10 s on the local node) and the
config-reloader has noticed and reloaded Prometheus. The reloader notices by inotify and, should
that miss the kubelet's swap of the volume, by re-reading every 3 minutes (its --watch-interval,
which the operator does not set); one run out of two here needed the second way."""
# Grafana's variables, made concrete; the namespace is the module's, filled in per query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "${agent}": ".*"}


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def decide(body: dict[str, Any]) -> Text | ToolCalls | HttpError:
    """The scripted LLM: who asks is told by the system prompt, what next by the last message."""
    messages = body["messages"]
    system = text_of(messages[0]["content"]) if messages[0]["role"] == "system" else ""
    last = messages[-1]
    if last["role"] == "user" and FAIL in text_of(last["content"]):
        return HttpError(500, "the fake LLM fails on purpose")
    if system == ORCHESTRATOR:
        if last["role"] == "user":
            ask = Call("researcher__send_message", {"message": f"research: {text_of(last['content'])}"})
            return ToolCalls([ask], usage=USAGE)
        return Text(f"Final answer: {text_of(last['content'])}", usage=USAGE)
    if last["role"] == "user":
        return ToolCalls(list(RESEARCH_CALLS), usage=USAGE)
    return Text("researched", usage=USAGE)


# --- the world ------------------------------------------------------------------------------


@dataclass
class Servers:
    loop: LoopThread
    llm: FakeOpenAI
    tools: RunningServer
    secret: RunningServer
    errors: RunningServer


@dataclass
class World:
    cluster: LocalCluster
    namespace: str
    clients: str
    """Another namespace, of the client pods."""
    node: LocalNode
    operator: OperatorRelease
    servers: Servers
    prometheus: str

    def kubectl(self, *args: str, check: bool = True) -> str:
        return self.cluster.kubectl(*args, check=check).stdout

    def agent_host(self, agent: str) -> str:
        return f"{agent}.{self.namespace}.svc.cluster.local"

    def agent_url(self, agent: str) -> str:
        return f"http://{self.agent_host(agent)}:8000/mcp"

    @property
    def registry(self) -> str:
        return f"http://{DEPLOYMENT}-registry.{self.namespace}.svc.cluster.local:8080"

    def agent(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "pallasagent", name, "-n", self.namespace, "-o", "json")))

    def agent_ready(self, name: str) -> bool:
        obj = self.agent(name)
        wanted = ("Accepted", "Available", "Verified", "Healthy", "Ready")
        return all((condition(obj, t) or ("",))[0] == "True" for t in wanted)

    def pod_of(self, namespace: str, selector: str) -> str:
        names = self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "name").split()
        assert names, f"no pod matches {selector} in {namespace}"
        return names[0]

    def connects(self, namespace: str, pod: str, host: str, port: int) -> str:
        """From inside `pod`: 'connected', or why a TCP connection could not be opened (3 s)."""
        probe = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(({host!r}, {port}), timeout=3).close()\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print(type(exc).__name__, exc)\n"
        )
        return self.kubectl("exec", "-n", namespace, pod, "--", "python", "-c", probe).strip()

    def diagnose(self) -> str:
        parts = [
            self.kubectl("get", "pallasagents,pods", "-n", self.namespace, "-o", "wide", check=False),
            self.kubectl("get", "pods", "-n", PROMETHEUS_NAMESPACE, "-o", "wide", check=False),
            self.kubectl("get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp", check=False)[
                -2000:
            ],
            self.operator.log_tail(20),
            self.kubectl("get", "servicemonitors,prometheusrules", "-A", check=False),
            self.kubectl(
                "get", "pallasdeployment", DEPLOYMENT, "-n", self.namespace, "-o", "yaml", check=False
            )[-1500:],
            f"--- Prometheus targets:\n{self.targets_summary()}",
            f"--- scrape jobs the operator wrote / Prometheus runs:\n{self.jobs_summary()}",
            "--- the Prometheus Operator's log (its syncs and complaints):",
            "\n".join(
                line
                for line in self.kubectl(
                    "logs", "-n", PROMETHEUS_NAMESPACE, "deploy/prometheus-operator", check=False
                ).splitlines()
                if re.search(r"sync prometheus|level=(warn|error)|skipping|rejected", line)
            )[-3000:],
            "--- the config-reloader's log:",
            self.kubectl(
                "logs",
                "-n",
                PROMETHEUS_NAMESPACE,
                "prometheus-pallas-0",
                "-c",
                "config-reloader",
                "--tail=10",
                check=False,
            ),
        ]
        return "\n".join(parts)

    def jobs_summary(self) -> str:
        """Where a missing target got stuck: the operator's Secret, or the reload of Prometheus."""
        encoded = self.kubectl(
            "get", "secret", f"prometheus-{PROMETHEUS}", "-n", PROMETHEUS_NAMESPACE,
            "-o", "jsonpath={.data.prometheus\\.yaml\\.gz}", check=False,
        )  # fmt: skip
        try:
            written = gzip.decompress(base64.b64decode(encoded)).decode()
            loaded = self.api("status/config")["yaml"]
        except (ValueError, OSError, httpx2.HTTPError, AssertionError) as exc:
            return f"(unreadable: {exc})"
        jobs = re.compile(r"job_name: (\S+)")
        return f"written: {jobs.findall(written)}\nloaded:  {jobs.findall(loaded)}"

    def targets_summary(self) -> str:
        try:
            active = self.api("targets")["activeTargets"]
        except (httpx2.HTTPError, AssertionError, ValueError) as exc:
            return f"(unreadable: {exc})"
        return (
            "\n".join(
                f"{t['scrapePool']} {t['labels'].get('service')} {t['scrapeUrl']} "
                f"{t['health']} {t.get('lastError', '')}"
                for t in active
            )
            or "(none)"
        )

    async def until(self, what: str, probe: Any, within: float) -> Any:
        return await until(what, probe, within, interval=0.5, diagnose=self.diagnose)

    # Prometheus's HTTP API

    def api(self, path: str, **params: str) -> Any:
        response = httpx2.get(f"{self.prometheus}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


def manifests(namespace: str, clients: str, servers: Servers, first_node: str) -> list[dict[str, Any]]:
    """The team: a PallasDeployment with ServiceMonitors and the NetworkPolicy on, and two agents.

    The agents run on the first node, where this machine's own connections (the tests, `pallas
    chat`) are the node's and so never subject to a policy, as upstream designed it; on another
    node they would come from outside it, as from another machine. The client pods, Prometheus and
    the operator land on either node, so allowed and refused traffic crosses nodes too."""
    meta = {"namespace": namespace}
    pinned = {"nodeSelector": {"kubernetes.io/hostname": first_node}}
    by_name = {"matchLabels": {"kubernetes.io/metadata.name": PROMETHEUS_NAMESPACE}}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "llm", **meta},
            "stringData": {"OPENAI_API_KEY": "sk-consumers"},
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
                        "apiKey": {"secretKeyRef": {"name": "llm", "key": "OPENAI_API_KEY"}},
                        "timeoutSeconds": 30,
                        "maxRetries": 0,
                    }
                },
                "mcpServers": {
                    "tools": {"url": servers.tools.url},
                    "secret": {"url": servers.secret.url},
                    "errors": {"url": servers.errors.url},
                },
                "registry": {"enabled": True, "port": 8080},
                "healthCheck": {"intervalSeconds": 5, "timeoutSeconds": 2},
                "monitoring": {"serviceMonitor": {"enabled": True, "interval": "5s", "labels": SELECTED}},
                "network": {
                    "policy": True,
                    "allowFrom": [
                        {"namespaceSelector": by_name, "podSelector": {"matchLabels": PROMETHEUS_PODS}},
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": clients}},
                            "podSelector": {"matchLabels": CLIENT_LABELS},
                        },
                    ],
                },
                "runtime": {"env": [{"name": "FASTMCP_CHECK_FOR_UPDATES", "value": "off"}]},
            },
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "researcher", **meta},
            "spec": {
                "deployment": DEPLOYMENT,
                "description": "Researches with its tools",
                "instruction": RESEARCHER,
                "servers": ["tools", "secret", "errors"],
                "tools": {"deny": ["secret__*"]},
                "capabilities": ["research"],
                "pod": pinned,
            },
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "orchestrator", **meta},
            "spec": {
                "deployment": DEPLOYMENT,
                "description": "Asks the researcher",
                "instruction": ORCHESTRATOR,
                "agents": ["researcher"],
                "pod": pinned,
            },
        },
    ]


def client_pod(
    name: str, namespace: str, image: str, labels: dict[str, str], command: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def consumers_node(kube_cluster: LocalCluster) -> LocalNode:
    return local_node()


@pytest.fixture(scope="module")
def monitoring_stack(consumers_node: LocalNode) -> Iterator[str]:
    """hack/local/monitoring up (removed again at the end); Prometheus's URL."""
    up = subprocess.run([str(MONITORING), "up"], capture_output=True, text=True, timeout=900)
    try:
        if up.returncode != 0:
            pytest.fail(f"hack/local/monitoring up failed:\n{up.stderr[-4000:]}", pytrace=False)
        yield up.stdout.strip()
    finally:
        subprocess.run([str(MONITORING), "down"], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def consumers_servers(consumers_node: LocalNode) -> Iterator[Servers]:
    loop = LoopThread()
    host = consumers_node.ip
    try:
        llm = loop.enter(FakeOpenAI(default=decide, models=[MODEL], host=host))
        tools = loop.enter(header_echo_server(host=host))
        secret = loop.enter(header_echo_server(host=host))
        errors = loop.enter(error_server(host=host))
        yield Servers(loop, llm, tools, secret, errors)
    finally:
        loop.close()


@pytest.fixture(scope="module")
def world(
    pallas_crds: LocalCluster,
    consumers_node: LocalNode,
    monitoring_stack: str,
    consumers_servers: Servers,
) -> Iterator[World]:
    namespace, clients = f"t-consumers-{secrets.token_hex(3)}", f"t-clients-{secrets.token_hex(3)}"
    stack = contextlib.ExitStack()
    with stack:
        for name in (namespace, clients):
            create_namespace(pallas_crds, name)
            stack.callback(delete_namespace, pallas_crds, name)
        labels = {f"metrics.serviceMonitor.labels.{k}": v for k, v in SELECTED.items()}
        labels |= {f"prometheusRule.labels.{k}": v for k, v in SELECTED.items()}
        operator = install_operator(
            pallas_crds,
            namespace,
            consumers_node.image,
            {
                "metrics.serviceMonitor.enabled": "true",
                "metrics.serviceMonitor.interval": "5s",
                "metrics.serviceMonitor.scrapeTimeout": "4s",
                "prometheusRule.enabled": "true",
                "prometheusRule.alertFor.PallasAgentErrorRateHigh": "0s",
                **labels,
            },
        )
        stack.callback(operator.uninstall)
        kubectl_apply(pallas_crds, *manifests(namespace, clients, consumers_servers, consumers_node.name))
        image = consumers_node.image
        kubectl_apply(
            pallas_crds,
            client_pod("client", clients, image, CLIENT_LABELS, ["sleep", "3600"]),
            client_pod("outsider", clients, image, {}, ["sleep", "3600"]),
        )
        yield World(
            pallas_crds, namespace, clients, consumers_node, operator, consumers_servers, monitoring_stack
        )


@pytest.fixture
async def ready(world: World) -> World:
    """The world once both agents are Ready (verified and health-checked by the operator through
    the NetworkPolicy) and the client pods run."""
    for name in AGENTS:
        await world.until(f"agent {name} Ready", lambda n=name: world.agent_ready(n), READY_WITHIN)
    wait_for(
        "the client pods Running",
        lambda: (
            world.kubectl(
                "get", "pods", "-n", world.clients, "-o", "jsonpath={.items[*].status.phase}"
            ).split()
            == ["Running", "Running"]
        ),
        READY_WITHIN,
    )
    return world


def mcp_client(url: str) -> Client[Any]:
    return Client(StreamableHttpTransport(url), mode="legacy", timeout=60)


async def send(world: World, agent: str, message: str) -> tuple[bool, str]:
    """One send_message from this machine (the node's root user: never subject to the policy)."""
    async with mcp_client(world.agent_url(agent)) as client:
        result = await client.call_tool_mcp("send_message", {"message": message})
    return not result.is_error, text_of([c.model_dump() for c in result.content])


@dataclass(frozen=True)
class Traffic:
    """What the `traffic` fixture made happen, as Prometheus has seen it."""

    ok: int
    errors: int


@pytest.fixture(scope="module")
def traffic(world: World) -> Traffic:
    """Turns that succeed (with tool calls that succeed, fail and are denied) and turns that fail,
    twice over with a scrape in between, so every counter has a rate. Ready first."""
    for name in AGENTS:
        wait_for(f"agent {name} Ready", lambda n=name: world.agent_ready(n), READY_WITHIN)
    ok = errors = 0
    for round_ in (1, 2):
        good, answer = asyncio.run(send(world, "orchestrator", f"what is new? ({round_})"))
        assert good, answer
        ok += 1
        bad, answer = asyncio.run(send(world, "researcher", f"{FAIL} ({round_})"))
        assert not bad, answer
        errors += 1
        seen = (
            f'pallas_send_message_total{{namespace="{world.namespace}", agent="researcher", outcome="error"}}'
            f" >= {errors}"
        )
        wait_for(
            f"Prometheus seeing {errors} failed turn(s)", lambda q=seen: world.query(q), CONFIGURED_WITHIN
        )
    return Traffic(ok, errors)


# --- monitoring -----------------------------------------------------------------------------


async def test_the_operator_generated_configuration_scrapes_agents_registry_and_operator(
    ready: World,
) -> None:
    world = ready
    ns = world.namespace
    wanted = {
        **dict.fromkeys(AGENTS, f"serviceMonitor/{ns}/{DEPLOYMENT}-agents/0"),
        f"{DEPLOYMENT}-registry": f"serviceMonitor/{ns}/{DEPLOYMENT}-registry/0",
        "pallas-operator-metrics": f"serviceMonitor/{ns}/pallas-operator/0",
    }

    def up_targets() -> dict[str, dict[str, Any]] | None:
        found = {
            t["labels"].get("service"): t
            for t in world.api("targets", state="active")["activeTargets"]
            if t["labels"].get("namespace") == ns and t["health"] == "up"
        }
        return found if set(wanted) <= set(found) else None

    targets = await world.until(
        "every agent, the registry and the operator an up target", up_targets, CONFIGURED_WITHIN
    )
    for service, pool in wanted.items():
        target = targets[service]
        # The Prometheus Operator's making: one scrape pool per ServiceMonitor endpoint, the job
        # named after the Service, the pod found through the Service's endpoints.
        assert target["scrapePool"] == pool, target
        assert target["labels"]["job"] == service, target
        assert target["labels"]["pod"], target
        pod_ip = world.kubectl(
            "get", "pod", target["labels"]["pod"], "-n", ns, "-o", "jsonpath={.status.podIP}"
        )
        assert target["scrapeUrl"].startswith(f"http://{pod_ip}:"), target
        assert target["scrapeUrl"].endswith("/metrics"), target
    # The configuration came from the objects, not from a file of ours.
    config = world.api("status/config")["yaml"]
    assert f"job_name: serviceMonitor/{ns}/{DEPLOYMENT}-agents/0" in config
    assert "kubernetes_sd_configs" in config


async def test_send_message_total_moves_when_a_message_is_sent(ready: World) -> None:
    world = ready
    series = f'pallas_send_message_total{{namespace="{world.namespace}", agent="researcher", outcome="ok"}}'

    def scraped() -> float | None:
        return world.value(series)

    await world.until(
        "the researcher's pallas_send_message_total scraped", lambda: scraped() is not None, CONFIGURED_WITHIN
    )
    before = scraped()
    assert before is not None
    good, answer = await send(world, "researcher", "one more question")
    assert good, answer
    after = await world.until(
        "pallas_send_message_total moving by one in Prometheus",
        lambda: (v := scraped()) is not None and v >= before + 1 and v,
        SCRAPED_WITHIN,
    )
    assert after == before + 1


async def test_failed_turns_fire_the_error_rate_alert_of_the_charts_prometheus_rule(
    world: World, traffic: Traffic
) -> None:
    ns = world.namespace

    def rule_loaded() -> dict[str, Any] | None:
        for group in world.api("rules")["groups"]:
            for rule in group["rules"]:
                if rule.get("name") == "PallasAgentErrorRateHigh" and f"/{ns}-pallas-" in group["file"]:
                    return {"group": group, "rule": rule}
        return None

    loaded = await world.until(
        "the chart's PrometheusRule loaded into Prometheus", rule_loaded, CONFIGURED_WITHIN
    )
    assert loaded["group"]["name"] == "pallas.alerts"
    assert loaded["rule"]["duration"] == 0, "alertFor set the error-rate alert's `for` to 0s"

    def firing() -> list[dict[str, Any]]:
        return [
            a
            for a in world.api("alerts")["alerts"]
            if a["labels"]["alertname"] == "PallasAgentErrorRateHigh"
            and a["labels"].get("namespace") == ns
            and a["state"] == "firing"
        ]

    alerts = await world.until("PallasAgentErrorRateHigh firing for the researcher", firing, SCRAPED_WITHIN)
    assert {a["labels"]["agent"] for a in alerts} == {"researcher"}
    (alert,) = alerts
    assert alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["summary"].startswith("Agent researcher fails ")
    # The orchestrator's turns all succeeded: no alert for it (`alerts` holds pending ones too).
    everyone = world.api("alerts")["alerts"]
    agents = {
        a["labels"].get("agent") for a in everyone if a["labels"]["alertname"] == alert["labels"]["alertname"]
    }
    assert agents == {"researcher"}


def dashboard_queries(namespace: str) -> dict[str, str]:
    model = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in model["panels"]:
        panels += [panel, *panel.get("panels", [])]
    variables = {
        **GRAFANA_VARIABLES,
        "${namespace}": namespace,
        "$namespace": namespace,
        "$agent": ".*",
    }
    queries = {}
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in sorted(variables, key=len, reverse=True):
                expr = expr.replace(name, variables[name])
            assert "$" not in expr, expr
            queries[f"{panel['title']} / {target['refId']}"] = expr
    return queries


async def test_every_dashboard_query_returns_data_from_that_prometheus(
    world: World, traffic: Traffic
) -> None:
    queries = dashboard_queries(world.namespace)
    assert len(queries) >= 20

    def empty() -> list[str]:
        return [title for title, expr in queries.items() if not world.query(expr)]

    await world.until("every dashboard query returning data", lambda: not empty(), SCRAPED_WITHIN)
    # Data of this namespace's agents, not only the `or vector(0)` fallbacks.
    agents = world.query(queries["Agents / A"])
    assert float(agents[0]["value"][1]) == len(AGENTS)
    denied = world.query(queries["Tool call errors and denials / B"])
    assert {s["metric"]["server"] for s in denied} == {"secret"}
    failed = world.query(queries["Tool call errors and denials / A"])
    assert {s["metric"]["server"] for s in failed} >= {"errors"}


# --- NetworkPolicy --------------------------------------------------------------------------


async def test_a_pod_of_another_namespace_cannot_reach_an_agent(ready: World) -> None:
    world = ready
    outsider = "pod/outsider"
    # It has a network: the registry (which the policy does not cover) answers it.
    registry = f"{DEPLOYMENT}-registry.{world.namespace}.svc.cluster.local"
    assert world.connects(world.clients, outsider, registry, 8080) == "connected"
    for agent in AGENTS:
        refused = world.connects(world.clients, outsider, world.agent_host(agent), 8000)
        assert refused.startswith("TimeoutError"), f"{agent}: {refused}"
    # The enforcement is the policy's: its absence would have let the same pod in (the other
    # tests' teams run without it).
    policy = json.loads(
        world.kubectl("get", "networkpolicy", f"{DEPLOYMENT}-agents", "-n", world.namespace, "-o", "json")
    )
    assert policy["spec"]["podSelector"]["matchLabels"]["pallas.dev/deployment"] == DEPLOYMENT


async def test_the_callers_the_policy_allows_reach_the_agents(ready: World) -> None:
    world = ready
    ns = world.namespace
    callers = {
        "a client pod allowFrom names": (world.clients, "pod/client"),
        "the registry": (ns, world.pod_of(ns, "app.kubernetes.io/component=registry")),
        "the operator": (ns, world.pod_of(ns, "app.kubernetes.io/component=operator")),
        "a peer agent": (ns, world.pod_of(ns, "pallas.dev/agent=orchestrator")),
    }
    for who, (namespace, pod) in callers.items():
        seen = world.connects(namespace, pod, world.agent_host("researcher"), 8000)
        assert seen == "connected", f"{who} ({namespace}/{pod}): {seen}"

    # Prometheus (its image has no Python to try from) scrapes the agents' pods through it.
    def agents_scraped() -> bool:
        targets = world.api("targets", state="active")["activeTargets"]
        health = [
            t["health"]
            for t in targets
            if t["labels"].get("namespace") == ns and t["labels"].get("service") in AGENTS
        ]
        return health == ["up"] * len(AGENTS)

    await world.until("Prometheus scraping both agents (up)", agents_scraped, CONFIGURED_WITHIN)
    # And what they do through it works: the operator verified and health-checks the agents
    # (`ready`), and a turn goes orchestrator → researcher → tools.
    good, answer = await send(world, "orchestrator", "through the policy?")
    assert good, answer
    assert answer.startswith("Final answer: researched"), answer


# --- a client in a pod ----------------------------------------------------------------------


async def test_a_client_pod_finds_an_agent_through_the_registry_and_chats(ready: World) -> None:
    world = ready
    name = f"chat-{secrets.token_hex(3)}"
    command = [
        "pallas", "chat", "-m", "Who wrote The Republic?", "--timeout", "60",
        "--registry", world.registry, "orchestrator",
    ]  # fmt: skip
    kubectl_apply(world.cluster, client_pod(name, world.clients, world.node.image, CLIENT_LABELS, command))

    def finished() -> str:
        phase = world.kubectl("get", "pod", name, "-n", world.clients, "-o", "jsonpath={.status.phase}")
        return phase if phase in ("Succeeded", "Failed") else ""

    phase = await world.until("the chat pod finishing", finished, 120)
    logs = world.kubectl("logs", name, "-n", world.clients)
    assert phase == "Succeeded", logs
    lines = logs.splitlines()
    assert "Final answer: researched" in lines, logs
    answered = lines.index("Final answer: researched")
    # Progress while it waited, as the orchestrator relayed it (stderr; the log has both streams).
    assert any("researcher/send_message: completed" in line for line in lines[:answered]), logs
    assert any("orchestrator step 1 (llm)" in line for line in lines[:answered]), logs
    # It found the agent in the catalogue by cluster DNS (the registry's own count of the read).
    catalogue = httpx2.get(f"{world.registry}/.well-known/mcp/server.json", timeout=10).json()
    urls = {
        e["server"]["name"].rsplit("/", 1)[1]: e["server"]["remotes"][0]["url"] for e in catalogue["servers"]
    }
    assert urls["orchestrator"] == world.agent_url("orchestrator")
    world.kubectl("delete", "pod", name, "-n", world.clients, "--wait=false")
