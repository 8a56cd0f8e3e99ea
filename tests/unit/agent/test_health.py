"""get_health semantics: parallel probes, the provider check with a TTL, status and gauges."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime

import pytest

from pallas_api.config import parse_config
from pallas_runtime.agent.health import HealthChecker
from pallas_runtime.agent.live import LiveAgent, given_parts
from pallas_runtime.downstream.source import ProbeResult
from pallas_runtime.llm.provider import ProviderCheck
from pallas_runtime.metrics import RuntimeMetrics
from tests.unit.agent.doubles import FakeSource, ScriptedProvider


def checker(
    sources: list[FakeSource],
    check: ProviderCheck | None = None,
    api_key_env: str | None = None,
    environ: dict[str, str] | None = None,
    recheck: float = 300,
    api_key_source: str | None = None,
    busy_at: int | None = None,
    in_flight: list[int] | None = None,
    missing_servers: list[str] | None = None,
) -> tuple[HealthChecker, ScriptedProvider, RuntimeMetrics]:
    provider_cfg: dict[str, object] = {"name": "vllm", "type": "openai"}
    if api_key_env:
        provider_cfg["apiKeyEnv"] = api_key_env
    if api_key_source:
        provider_cfg["apiKeySource"] = api_key_source
    cfg = parse_config(
        {
            "name": "harper",
            "model": "m",
            "provider": provider_cfg,
            "health": {"providerRecheckSeconds": recheck},
            "busyAt": busy_at,
            "missingServers": missing_servers or [],
        }
    )
    provider = ScriptedProvider([], check or ProviderCheck(True, "", time.monotonic()))
    metrics = RuntimeMetrics(process_collectors=False)
    running = in_flight if in_flight is not None else [0]
    live = LiveAgent(cfg, metrics=metrics, secrets=environ or {}, parts=given_parts(provider, sources))
    health = HealthChecker(live, metrics, in_flight=lambda: running[0])
    return health, provider, metrics


def gauge(metrics: RuntimeMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_all_reachable_is_ok_and_sets_the_gauges() -> None:
    health, provider, metrics = checker([FakeSource("argos", []), FakeSource("neo4j", [])])
    report = await health.report()
    assert report.status == "ok"
    assert "message" not in json.loads(report.to_json())
    assert datetime.fromisoformat(report.timestamp.replace("Z", "+00:00"))
    assert gauge(metrics, "pallas_downstream_up", agent="harper", server="neo4j") == 1
    assert gauge(metrics, "pallas_llm_provider_up", provider="vllm") == 1
    assert gauge(metrics, "pallas_agent_health_status", agent="harper") == 1
    assert provider.preflights == 1


async def test_busy_when_the_calls_in_flight_reach_busy_at() -> None:
    running = [1]
    health, _, _ = checker([], busy_at=2, in_flight=running)
    report = json.loads((await health.report()).to_json())
    assert (report["status"], report["busy"], report["inFlight"]) == ("ok", False, 1)
    running[0] = 2
    report = json.loads((await health.report()).to_json())
    assert (report["status"], report["busy"], report["inFlight"]) == ("ok", True, 2)
    never, _, _ = checker([], in_flight=[50])
    assert set(json.loads((await never.report()).to_json())) == {"status", "timestamp", "configHash"}


async def test_a_server_the_deployment_does_not_define_degrades_naming_it() -> None:
    """The gateway seed: the agent runs on the servers that exist, and says which one it lacks."""
    health, _, _ = checker([FakeSource("argos", [])], missing_servers=["nope"])
    report = await health.report()
    assert report.status == "degraded"
    assert (
        report.message
        == "Servers: mcpServers nope not defined by the deployment: the agent runs without them"
    )


async def test_diagnostics_on_request_name_reloads_servers_and_the_tool_policy() -> None:
    """The gateway seed's diagnostic: reload counts, policy state and servers in one answer."""
    down = FakeSource("neo4j", [], probe_result=ProbeResult("neo4j", False, "timed out after 3s"))
    health, _, _ = checker([FakeSource("argos", []), down], missing_servers=["nope"])
    plain = json.loads((await health.report()).to_json())
    assert "diagnostics" not in plain
    live = health._live
    live.apply(live.config.model_copy(update={"instruction": "Be brief."}))
    live.apply(live.config.model_copy(update={"version": "9.9.9"}))  # needs a new process
    report = json.loads((await health.report(diagnostics=True)).to_json())
    assert report["diagnostics"] == {
        "reloads": {"applied": 1, "refused": 1, "invalid": 0},
        "servers": [{"name": "argos", "up": True}, {"name": "neo4j", "up": False}],
        "missingServers": ["nope"],
        "tools": {"allow": ["*"], "deny": []},
    }
    assert report["status"] == "degraded"  # the report itself is the same


async def test_an_unreachable_downstream_degrades_naming_it() -> None:
    down = FakeSource(
        "neo4j_cypher", [], probe_result=ProbeResult("neo4j_cypher", False, "timed out after 3s")
    )
    health, _, metrics = checker([FakeSource("argos", []), down])
    report = await health.report()
    assert report.status == "degraded"
    assert report.message == "Unreachable: neo4j_cypher (timed out after 3s)"
    assert gauge(metrics, "pallas_downstream_up", agent="harper", server="neo4j_cypher") == 0
    assert gauge(metrics, "pallas_agent_health_status", agent="harper") == 0.5


async def test_a_failed_provider_check_degrades_with_its_message() -> None:
    bad = ProviderCheck(False, "openai provider 'vllm': model 'bad-model' not found", time.monotonic())
    health, _, metrics = checker([], bad)
    await health.check_provider()  # the startup preflight
    report = await health.report()
    assert (report.status, report.message) == (
        "degraded",
        "LLM: openai provider 'vllm': model 'bad-model' not found (checked 0s ago)",
    )
    assert gauge(metrics, "pallas_llm_provider_up", provider="vllm") == 0


async def test_a_missing_api_key_is_an_error_because_no_request_can_succeed() -> None:
    missing = ProviderCheck(
        False,
        "openai provider 'vllm': no API key: environment variable VLLM_KEY is not set",
        time.monotonic(),
    )
    health, _, metrics = checker([], missing, api_key_env="VLLM_KEY", environ={})
    report = await health.report()  # known before any provider check has finished
    assert (report.status, report.message) == (
        "error",
        "LLM: openai provider 'vllm': no API key: environment variable VLLM_KEY is not set",
    )
    assert gauge(metrics, "pallas_agent_health_status", agent="harper") == 0


async def test_a_missing_api_key_names_the_secret_the_user_wrote_not_the_pods_variable() -> None:
    health, _, _ = checker(
        [], api_key_env="PALLAS_PROVIDER_VLLM_API_KEY", environ={}, api_key_source="Secret llm key VLLM_KEY"
    )
    report = await health.report()
    assert report.message == "LLM: openai provider 'vllm': no API key: Secret llm key VLLM_KEY is not set"


async def test_the_provider_check_is_reused_until_its_ttl_then_reprobed() -> None:
    health, provider, _ = checker([], recheck=0.2)
    await health.check_provider()  # the startup preflight
    await health.report()
    await health.report()
    assert provider.preflights == 1
    provider.check = ProviderCheck(True, "", time.monotonic() - 1)  # an old result
    await health.check_provider()
    await health.report()
    assert provider.preflights == 3


@pytest.mark.looptime
async def test_health_never_waits_for_a_hanging_provider_and_reports_a_stale_failure_with_its_age(
    looptime: float,
) -> None:
    health, provider, _ = checker([], recheck=0.05)
    provider.hang = asyncio.Event()  # the models endpoint does not answer
    report = await asyncio.wait_for(health.report(), 60)  # no check yet: the provider is not judged
    assert report.status == "ok"
    assert looptime == 0, "get_health waited on a timer (the fake loop clock moved)"
    provider.hang.set()
    provider.check = ProviderCheck(False, "openai provider 'vllm': timed out after 5s", time.monotonic() - 7)
    await health.check_provider()
    report = await health.report()
    assert report.status == "degraded"
    assert report.message == "LLM: openai provider 'vllm': timed out after 5s (checked 7s ago)"
