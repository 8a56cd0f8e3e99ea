"""The chart's monitoring artefacts: the alert rules and the Grafana dashboard, checked for real.

- `promtool check rules` accepts the rules file, and every alert carries severity, summary,
  description and `for`.
- Every PromQL expression of the dashboard parses: promtool has no query checker, so each
  target becomes a recording rule in a temporary rule file (template variables replaced by
  concrete values) that `promtool check rules` must accept.
- A real Prometheus (Debian's package, installed by hack/build/system-deps.sh) on 127.0.0.1 with a
  1 s scrape and evaluation interval scrapes a running agent and a registry, loads the rules
  (a copy with every `for:` set to 0 s so alerts fire at once), and the test reads its HTTP API:
  the targets are up, `pallas_send_message_total` has samples, every rule group evaluates with
  health "ok", the alerts the traffic provokes fire (downstream unreachable, error ratio,
  process down for a static `pallas…` job and for a target that stopped) and the others do not,
  and every dashboard query evaluates.

Job names mimic the Prometheus Operator's (the Service name: `chat-agent`, `ouranos-registry`),
so the process-down rule is exercised on its "was a Pallas target" branch, not on a job-name
pattern.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import pytest_asyncio
import yaml
from fastmcp import Client, FastMCP

from pallas_registry.source import MemorySource
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, HttpError, Text, ToolCalls
from tests.support.mcp_servers import serve
from tests.support.ports import closed_port, logged_port
from tests.support.registry import running_registry, state

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "charts" / "pallas" / "files" / "rules" / "pallas-alerts.yaml"
DASHBOARD = REPO / "charts" / "pallas" / "files" / "dashboards" / "pallas-overview.json"
SYSTEM_DEPS = REPO / "hack" / "build" / "system-deps.sh"

AGENT = "chat-agent"
NAMESPACE = "pallas-test"
AGENT_JOB = AGENT  # what a ServiceMonitor's job would be: the Service name
REGISTRY_JOB = "ouranos-registry"
STATIC_JOB = "pallas-static"  # a static scrape config of the seed's style, pointing at nothing
EXPECTED_ALERTS = {
    "PallasProcessDown",
    "PallasLLMProviderUnreachable",
    "PallasDownstreamUnreachable",
    "PallasAgentErrorRateHigh",
    "PallasAgentLatencyHigh",
    "PallasTokenBurnHigh",
    "PallasTriggerFailing",
}
SEVERITIES = {"critical", "warning", "info"}
# Concrete values for Grafana's template variables, so the expressions are plain PromQL.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "${agent}": ".*",
    "$agent": ".*",
    "${namespace}": ".*",
    "$namespace": ".*",
}
WAIT_LIMIT = 15.0
"""Seconds any one wait on Prometheus may take (the whole part takes about 10 s)."""


# --- the files ----------------------------------------------------------------------------------


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    model: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return model


def dashboard_panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # collapsed rows nest theirs
    return panels


def concrete(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced (longest names first)."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"unhandled template variable in {expr!r}"
    return expr


def dashboard_queries() -> dict[str, str]:
    """`"<panel title> / <refId>"` → its concrete PromQL."""
    return {
        f"{panel['title']} / {target['refId']}": concrete(target["expr"])
        for panel in dashboard_panels()
        for target in panel.get("targets", [])
    }


@pytest.fixture(scope="session")
def promtool() -> str:
    return _system_command("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _system_command("prometheus")


def _system_command(name: str) -> str:
    """A command from Debian's prometheus package, installed by hack/build/system-deps.sh when missing."""
    res = subprocess.run([str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=600, check=False)
    path = shutil.which(name)
    if res.returncode != 0 or path is None:
        last = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.fail(
            f"{name} unavailable: hack/build/system-deps.sh exited {res.returncode}: {last}", pytrace=False
        )
    return path


def check_rules(promtool: str, path: Path) -> str:
    res = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_promtool_accepts_the_rules_file(promtool: str):
    out = check_rules(promtool, RULES)
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_groups())} rules found" in out


def test_every_alert_has_severity_annotations_and_for():
    found = alerts()
    assert {rule["alert"] for rule in found} == EXPECTED_ALERTS
    for rule in found:
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert rule["annotations"]["summary"].strip(), name
        assert rule["annotations"]["description"].strip(), name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name


def test_error_rate_alert_is_a_ratio_over_ten_minutes():
    (rule,) = (r for r in alerts() if r["alert"] == "PallasAgentErrorRateHigh")
    expr = " ".join(rule["expr"].split())
    assert 'rate(pallas_send_message_total{outcome="error"}[10m])' in expr
    assert "/ sum by (namespace, agent) (rate(pallas_send_message_total[10m]))" in expr
    assert expr.endswith("> 0.1")


def test_dashboard_has_identity_and_template_variables():
    model = dashboard()
    assert model["uid"] == "pallas-overview"
    assert model["title"]
    assert "pallas" in model["tags"]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "agent"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert variables[name]["includeAll"] is True


def test_dashboard_panels_use_the_datasource_variable_and_cover_the_seed_queries():
    panels = dashboard_panels()
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    exprs = []
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            exprs.append(target["expr"])
    text = "\n".join(exprs)
    for needle in (
        'pallas_send_message_total{namespace=~"$namespace", agent=~"$agent", outcome="error"}',
        "pallas_send_message_duration_seconds_bucket",
        "pallas_llm_tokens_total",
        'kind="cache_read"',
        "pallas_downstream_up",
        "pallas_llm_provider_up",
        "pallas_agent_health_status",
        "pallas_llm_request_duration_seconds_bucket",
        "pallas_tool_calls_total",
        "pallas_active_conversations",
    ):
        assert needle in text, f"no dashboard query uses {needle}"


def test_every_dashboard_query_parses(promtool: str, tmp_path: Path):
    queries = dashboard_queries()
    assert len(queries) >= 20
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(queries.values())]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in check_rules(promtool, path)


# --- a real Prometheus --------------------------------------------------------------------------


def calc_mcp() -> FastMCP:
    mcp = FastMCP("calc")

    @mcp.tool(output_schema=None)
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        return str(a + b)

    return mcp


def rules_without_for() -> dict[str, Any]:
    """The rules file with every `for:` at 0 s, so an alert fires on its first true evaluation."""
    document: dict[str, Any] = yaml.safe_load(RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "0s"
    return document


def prometheus_config(agent_port: int, registry_port: int, dead_port: int) -> dict[str, Any]:
    def job(name: str, port: int) -> dict[str, Any]:
        return {
            "job_name": name,
            "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE}}],
        }

    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            job(AGENT_JOB, agent_port),
            job(REGISTRY_JOB, registry_port),
            job(STATIC_JOB, dead_port),
        ],
    }


@dataclass
class Prometheus:
    """A Prometheus process's HTTP API."""

    http: httpx2.AsyncClient

    async def api(self, path: str, **params: str) -> Any:
        response = await self.http.get(f"/api/v1/{path}", params=params)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        data = await self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    async def firing(self) -> set[tuple[str, str]]:
        """(alertname, job) of every firing alert."""
        series = await self.query('ALERTS{alertstate="firing"}')
        return {(s["metric"]["alertname"], s["metric"].get("job", "")) for s in series}

    async def wait_for(
        self, what: str, check: Callable[[], Awaitable[bool]], limit: float = WAIT_LIMIT
    ) -> None:
        deadline = time.monotonic() + limit
        while not await check():
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus: {what} not within {limit:g}s")
            await asyncio.sleep(0.2)


@dataclass
class Stack:
    prometheus: Prometheus
    llm: FakeOpenAI
    agent_url: str
    stop_registry: Callable[[], Awaitable[None]]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


@contextlib.asynccontextmanager
async def run_prometheus(binary: str, workdir: Path, config: dict[str, Any]) -> AsyncIterator[Prometheus]:
    """Prometheus on a loopback port the OS picks, with its storage in `workdir`; stopped on exit."""
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    (workdir / "rules.yaml").write_text(yaml.safe_dump(rules_without_for()))
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            "--web.listen-address=127.0.0.1:0",
            "--log.level=info",  # its "Listening on" line says which port port 0 became
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group, so cleanup reaches all of it
        )
    try:
        port = await asyncio.to_thread(
            logged_port, log_path, r'msg="Listening on" address=127\.0\.0\.1:(\d+)', WAIT_LIMIT,
            lambda: proc.returncode,
        )  # fmt: skip
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            deadline = time.monotonic() + WAIT_LIMIT
            while True:
                assert proc.returncode is None, log_path.read_text()[-2000:]
                with contextlib.suppress(httpx2.TransportError):
                    if (await http.get("/-/ready")).status_code == 200:
                        break
                assert time.monotonic() < deadline, f"Prometheus not ready within {WAIT_LIMIT:g}s"
                await asyncio.sleep(0.1)
            yield Prometheus(http)
    finally:
        await _stop(proc)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    registry_stack = contextlib.AsyncExitStack()
    with closed_port() as broken, closed_port() as unscraped:
        async with _stack(prometheus_bin, tmp_path_factory, registry_stack, broken, unscraped) as running:
            yield running


@contextlib.asynccontextmanager
async def _stack(
    prometheus_bin: str,
    tmp_path_factory: pytest.TempPathFactory,
    registry_stack: contextlib.AsyncExitStack,
    broken: int,
    unscraped: int,
) -> AsyncIterator[Stack]:
    async with FakeOpenAI() as llm, serve(calc_mcp()) as calc:
        config = agent_config(
            llm.base_url,
            name=AGENT,
            servers=[
                {"name": "calc", "url": calc.url},
                # Nothing listens there: get_health reports it down.
                {"name": "broken", "url": f"http://127.0.0.1:{broken}/mcp"},
            ],
        )
        async with serve_agent(config) as agent:
            registry_url = await registry_stack.enter_async_context(
                running_registry(MemorySource([state("research")]))
            )
            try:
                config_doc = prometheus_config(agent.port, int(registry_url.rsplit(":", 1)[1]), unscraped)
                workdir = tmp_path_factory.mktemp("prometheus")
                async with run_prometheus(prometheus_bin, workdir, config_doc) as prometheus:
                    yield Stack(prometheus, llm, agent.url, registry_stack.aclose)
            finally:
                await registry_stack.aclose()


ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
"""The Prometheus tests share the module-scoped `stack` and run in this order."""


@ON_MODULE_LOOP
async def test_prometheus_scrapes_the_agent_and_the_registry(stack: Stack):
    prometheus = stack.prometheus

    async def both_up() -> bool:
        targets = (await prometheus.api("targets"))["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in targets}
        return health.get(AGENT_JOB) == "up" and health.get(REGISTRY_JOB) == "up"

    await prometheus.wait_for("agent and registry targets up", both_up)
    active = await prometheus.query('pallas_registry_servers{status="active"}')
    assert [float(s["value"][1]) for s in active] == [1.0]
    assert await prometheus.query(f'pallas_agent_info{{job="{AGENT_JOB}", agent="{AGENT}"}}')


@ON_MODULE_LOOP
async def test_traffic_fires_the_matching_alerts_only(stack: Stack):
    prometheus, llm = stack.prometheus, stack.llm
    async with Client(stack.agent_url, mode="legacy", timeout=30) as client:

        async def send(conversation: str) -> bool:
            result = await client.call_tool_mcp(
                "send_message", {"message": "add 1 and 2", "conversation_id": conversation}
            )
            return not result.is_error

        async def scraped(outcome: str, at_least: int) -> bool:
            series = await prometheus.query(
                f'pallas_send_message_total{{agent="{AGENT}", outcome="{outcome}"}} >= {at_least}'
            )
            return bool(series)

        # Each outcome's series first appears with these calls; a rate needs a second sample
        # after an increase, so each outcome happens again once Prometheus has seen the first.
        llm.script(ToolCalls([Call("calc__add", {"a": 1, "b": 2})]), Text("3"), HttpError(500, "down"))
        assert await send("c1")
        assert not await send("c2")
        await prometheus.wait_for("first outcomes scraped", lambda: _both(scraped, 1))
        llm.script(Text("3"), HttpError(500, "down"))
        assert await send("c1")
        assert not await send("c2")
        health = await client.call_tool_mcp("get_health", {})
        assert json.loads(health.content[0].text)["status"] == "degraded"

    wanted = {
        ("PallasDownstreamUnreachable", AGENT_JOB),
        ("PallasAgentErrorRateHigh", ""),
        ("PallasProcessDown", STATIC_JOB),
    }

    async def all_firing() -> bool:
        return wanted <= await prometheus.firing()

    await prometheus.wait_for(f"alerts {sorted(wanted)} firing", all_firing)
    firing = await prometheus.firing()
    assert {name for name, _ in firing} == {name for name, _ in wanted}, firing
    # The recording group evaluates on its own schedule; its ratio follows within a second or two.
    ratio_query = f'pallas:send_message_error_ratio:rate10m{{agent="{AGENT}"}} > 0.1'
    await prometheus.wait_for("the recorded error ratio", lambda: _has_data(prometheus, ratio_query))


async def _has_data(prometheus: Prometheus, expr: str) -> bool:
    return bool(await prometheus.query(expr))


async def _both(check: Callable[[str, int], Awaitable[bool]], at_least: int) -> bool:
    return await check("ok", at_least) and await check("error", at_least)


@ON_MODULE_LOOP
async def test_every_rule_group_evaluates_healthy(stack: Stack):
    groups = (await stack.prometheus.api("rules"))["groups"]
    assert {g["name"] for g in groups} == {g["name"] for g in rule_groups()}
    for group in groups:
        for rule in group["rules"]:
            assert rule["health"] == "ok", (group["name"], rule["name"], rule.get("lastError"))
            assert not rule["lastEvaluation"].startswith("0001-"), (group["name"], rule["name"])
        assert not group["lastEvaluation"].startswith("0001-"), group["name"]


@ON_MODULE_LOOP
async def test_every_dashboard_query_evaluates_and_the_seed_panels_have_data(stack: Stack):
    queries = dashboard_queries()
    results = {title: await stack.prometheus.query(expr) for title, expr in queries.items()}
    for title in (
        "Error rate per agent / A",
        "p95 send_message latency per agent / A",
        "Token spend per model and kind / A",
        "Downstream MCP servers up / A",
        "LLM provider up / A",
        "Agent health status / A",
        "Tool calls by outcome / A",
        "Active conversations / A",
        "Catalogue entries by status / A",
    ):
        assert results[title], f"{title}: no data"
    down = {s["metric"]["server"]: float(s["value"][1]) for s in results["Downstream MCP servers up / A"]}
    assert down == {"calc": 1.0, "broken": 0.0}


@ON_MODULE_LOOP
async def test_a_target_that_stops_fires_process_down(stack: Stack):
    await stack.stop_registry()

    async def registry_down() -> bool:
        return ("PallasProcessDown", REGISTRY_JOB) in await stack.prometheus.firing()

    await stack.prometheus.wait_for("PallasProcessDown for the stopped registry", registry_down)
