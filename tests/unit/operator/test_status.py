"""The status policy: conditions, transitions, phase and references checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from pallas_api.references import find_cycle
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.spending import SpendReport
from pallas_api.status import PallasAgentStatus, PallasDeploymentStatus, ServerInfo
from pallas_operator.status import (
    AgentFacts,
    AgentObservation,
    AgentSummary,
    DeploymentObservation,
    HealthResult,
    Problem,
    ProviderCheck,
    ProviderReport,
    Verification,
    Workload,
    agent_status,
    check_agent,
    deployment_status,
    waiting_for,
    workload,
)
from tests.support.operator import agent, deployment, spec

T0, T1, T2 = "2026-11-21T10:00:00Z", "2026-11-21T10:01:00Z", "2026-11-21T10:02:00Z"
EMPTY = PallasAgentStatus()
UP = Workload(replicas=1, ready_replicas=1, available=True, rolled_out=True, message="1/1 pods ready")
DOWN = Workload(replicas=1, ready_replicas=0, available=False, rolled_out=False, message="0/1 pods ready")
VERIFIED = Verification(
    ok=True, server_info=ServerInfo(name="research", version="1.0.0"), tools=("get_health",)
)


def _cond(status: PallasAgentStatus | PallasDeploymentStatus, type_: str) -> tuple[str, str]:
    found = next(c for c in status.conditions if c.type == type_)
    return found.status, found.reason


def _facts(name: str, *deps: str, ready: bool = True) -> AgentFacts:
    return AgentFacts(name=name, deployment="ouranos", dependencies=deps, ready=ready, port=8000)


@pytest.mark.parametrize(
    ("obs", "phase", "ready_reason"),
    [
        (AgentObservation(1, problem=Problem("DeploymentNotFound", "x")), "Failed", "DeploymentNotFound"),
        (AgentObservation(1, waiting_for=("b",), dependencies=("b",)), "Waiting", "DependenciesNotReady"),
        (AgentObservation(1), "Pending", "DeploymentNotCreated"),
        (AgentObservation(1, workload=DOWN), "Progressing", "DeploymentUnavailable"),
        (AgentObservation(1, workload=UP), "Progressing", "Verifying"),
        (AgentObservation(1, workload=UP, verification=Verification(ok=False, message="HTTP 502")),
         "Degraded", "VerificationFailed"),
        (AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("ok")),
         "Ready", "AgentReady"),
        (AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("degraded", "argos")),
         "Degraded", "AgentReady"),
        (AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("error", "no LLM")),
         "Degraded", "HealthError"),
        (AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult(None, "timed out")),
         "Degraded", "HealthCheckFailed"),
    ],
    ids=["failed", "waiting", "pending", "progressing", "verifying", "unverified", "ready", "degraded-health",
         "health-error", "health-call-failed"],
)  # fmt: skip
def test_phase_and_ready_summarize_the_conditions(
    obs: AgentObservation, phase: str, ready_reason: str
) -> None:
    status = agent_status(obs, EMPTY, T0)
    assert status.phase == phase
    assert _cond(status, "Ready")[1] == ready_reason
    assert [c.type for c in status.conditions] == [
        "Accepted", "DependenciesReady", "Available", "Verified", "Healthy", "Ready"
    ]  # fmt: skip


def test_transition_time_moves_only_when_the_status_does() -> None:
    first = agent_status(AgentObservation(1, workload=DOWN), EMPTY, T0)
    again = agent_status(AgentObservation(2, workload=DOWN), first, T1)
    times = {c.type: c.last_transition_time for c in again.conditions}
    assert set(times.values()) == {T0}
    assert {c.observed_generation for c in again.conditions} == {2}
    up = agent_status(AgentObservation(2, workload=UP), again, T2)
    moved = {c.type for c in up.conditions if c.last_transition_time == T2}
    assert moved == {"Available"}  # Verified and Healthy stay Unknown: only their reasons change


def test_same_observation_gives_an_identical_status() -> None:
    obs = AgentObservation(
        3, workload=UP, verification=VERIFIED, health=HealthResult("ok"), url="u", model="m"
    )
    first = agent_status(obs, EMPTY, T0)
    assert agent_status(obs, first, T1) == first


def test_without_fresh_probes_the_last_verdicts_stand_while_available() -> None:
    ready = agent_status(
        AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("ok")), EMPTY, T0
    )
    after_restart = agent_status(AgentObservation(1, workload=UP), ready, T1)
    assert after_restart == ready
    down = agent_status(AgentObservation(1, workload=DOWN), ready, T1)
    assert _cond(down, "Verified") == ("Unknown", "AwaitingAvailability")
    assert down.tools == ["get_health"]


def test_health_checked_at_moves_only_when_the_result_changes() -> None:
    obs = AgentObservation(
        1, workload=UP, verification=VERIFIED, health=HealthResult("degraded", "argos down")
    )
    first = agent_status(obs, EMPTY, T0)
    assert first.health is not None
    assert agent_status(obs, first, T1).health == first.health
    changed = agent_status(AgentObservation(1, workload=UP, health=HealthResult("ok")), first, T2)
    assert changed.health is not None
    assert (changed.health.status, changed.health.checked_at) == ("ok", T2)


def test_busy_is_carried_into_status_and_is_a_change_of_result() -> None:
    idle = agent_status(
        AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("ok", busy=False)),
        EMPTY,
        T0,
    )
    assert idle.health is not None
    assert idle.health.busy is False
    busy = agent_status(AgentObservation(1, workload=UP, health=HealthResult("ok", busy=True)), idle, T1)
    assert busy.health is not None
    assert (busy.health.busy, busy.health.checked_at, busy.phase) == (True, T1, "Ready")
    assert (
        "busy"
        not in (
            agent_status(
                AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("ok")), EMPTY, T0
            ).to_wire()["health"]
        )
    )


def test_find_cycle_names_the_path() -> None:
    agents = {"a": ["b"], "b": ["c"], "c": ["a"]}
    assert find_cycle("a", ["b"], agents) == ["a", "b", "c", "a"]
    assert find_cycle("a", ["c"], {"c": []}) is None
    # A dependency of a cycle is not itself in one.
    assert find_cycle("d", ["a"], agents) is None


def _agent_spec(*mods: object) -> PallasAgentSpec:
    return PallasAgentSpec.model_validate(agent("a", *mods)["spec"])  # type: ignore[arg-type]


def test_check_agent_reports_in_the_order_a_user_fixes_things() -> None:
    dep = PallasDeploymentSpec.model_validate(deployment()["spec"])
    assert check_agent("a", _agent_spec(), None, {}).reason == "DeploymentNotFound"  # type: ignore[union-attr]
    assert check_agent("ouranos-registry", _agent_spec(), dep, {}).reason == "NameConflict"  # type: ignore[union-attr]
    missing = check_agent("a", _agent_spec(spec(agents=["x"], dependsOn=["y"])), dep, {})
    assert missing == Problem("AgentNotFound", "PallasAgents not found in this namespace: x, y")
    cycle = check_agent("a", _agent_spec(spec(dependsOn=["b"])), dep, {"b": _facts("b", "a")})
    assert cycle == Problem("DependencyCycle", "agents and dependsOn form a cycle: a -> b -> a")
    assert check_agent("a", _agent_spec(spec(dependsOn=["b"])), dep, {"b": _facts("b")}) is None
    elsewhere = {"b": AgentFacts("b", "other", (), True, 8000)}
    astray = check_agent("a", _agent_spec(spec(workflow={"chain": {"steps": ["b"]}})), dep, elsewhere)
    assert astray == Problem(
        "StepOutsideDeployment",
        "workflow steps must be PallasAgents of this agent's deployment 'ouranos': "
        "step 'b' is an agent of deployment 'other'",
    )


class _LookupsOnly(dict[str, AgentFacts]):
    """A namespace's agents that refuse to be walked: a reconcile may only look agents up."""

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the check walked every agent of the namespace")

    def items(self) -> Any:
        raise AssertionError("the check walked every agent of the namespace")


def test_check_agent_looks_up_its_dependencies_without_walking_the_namespace() -> None:
    # Walking every agent per reconcile made a start-up over 1,000 agents O(N²): 243 s, not 60.
    dep = PallasDeploymentSpec.model_validate(deployment()["spec"])
    agents = _LookupsOnly({f"x{i}": _facts(f"x{i}") for i in range(1000)} | {"b": _facts("b", "a")})
    cycle = check_agent("a", _agent_spec(spec(dependsOn=["b"])), dep, agents)
    assert cycle == Problem("DependencyCycle", "agents and dependsOn form a cycle: a -> b -> a")
    missing = check_agent("a", _agent_spec(spec(agents=["y"])), dep, agents)
    assert missing == Problem("AgentNotFound", "PallasAgents not found in this namespace: y")


def test_waiting_for_lists_dependencies_not_ready() -> None:
    spec_ = _agent_spec(spec(agents=["b"], dependsOn=["c"]))
    assert waiting_for(spec_, {"b": _facts("b"), "c": _facts("c", ready=False)}) == ["c"]


def test_a_secret_key_the_pods_lack_is_the_reason_ready_is_false_and_names_it() -> None:
    # The operator reads no Secret: the agent's get_health says which of its keys have no value.
    message = "LLM: openai provider 'vllm': no API key: Secret llm key VLLM_KEY is not set"
    lacking = HealthResult("error", message, missing_secrets=("Secret llm key VLLM_KEY",))
    status = agent_status(AgentObservation(1, workload=UP, verification=VERIFIED, health=lacking), EMPTY, T0)
    assert _cond(status, "Healthy") == _cond(status, "Ready") == ("False", "SecretKeyNotFound")
    assert {c.message for c in status.conditions if c.type in ("Healthy", "Ready")} == {message}
    assert status.phase == "Degraded"
    # A header's Secret only degrades the agent: it serves, without that header.
    header = HealthResult("degraded", "Headers not sent, no value: Secret mn key key", missing_secrets=("x",))
    status = agent_status(AgentObservation(1, workload=UP, verification=VERIFIED, health=header), EMPTY, T0)
    assert _cond(status, "Healthy") == ("False", "HealthDegraded")
    assert _cond(status, "Ready") == ("True", "AgentReady")


def test_status_says_which_config_the_agent_serves_and_keeps_it_between_reports() -> None:
    wanted = AgentObservation(1, workload=UP, verification=VERIFIED, config_hash="new")
    old = agent_status(dataclasses.replace(wanted, health=HealthResult("ok", config_hash="old")), EMPTY, T0)
    assert (old.config_hash, old.served_config_hash) == ("new", "old")
    assert agent_status(wanted, old, T1).served_config_hash == "old"  # no fresh report: it stands
    caught_up = agent_status(
        dataclasses.replace(wanted, health=HealthResult("ok", config_hash="new")), old, T1
    )
    assert (caught_up.config_hash, caught_up.served_config_hash) == ("new", "new")
    assert caught_up.to_wire()["servedConfigHash"] == "new"


def test_workload_reads_a_deployment_object() -> None:
    obj = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                   "conditions": [{"type": "Available", "status": "True"}]},
    }  # fmt: skip
    assert workload(obj) == Workload(2, 1, True, True, "1/2 pods ready")
    assert workload(None) is None
    stale = {**obj, "metadata": {"generation": 3}}
    assert workload(stale).rolled_out is False  # type: ignore[union-attr]


def test_deployment_status_counts_agents_and_reports_monitoring() -> None:
    obs = DeploymentObservation(
        generation=1,
        agents=(AgentSummary(True, True), AgentSummary(False, False)),
        registry_enabled=True,
        registry=UP,
        registry_url="http://r",
        monitoring_enabled=True,
        monitoring_crd_present=False,
    )
    status = deployment_status(obs, PallasDeploymentStatus(), T0)
    assert (status.agents.total, status.agents.ready, status.agents.healthy) == (2, 1, 1)
    assert _cond(status, "Ready") == ("False", "AgentsNotReady")
    assert _cond(status, "MonitoringReady") == ("False", "ServiceMonitorCRDNotFound")
    assert status.registry_url == "http://r"
    no_registry = deployment_status(
        DeploymentObservation(1, (), False, None, "http://r", False, False), PallasDeploymentStatus(), T0
    )
    assert _cond(no_registry, "Ready") == ("True", "AllAgentsReady")
    assert no_registry.registry_url is None
    assert "MonitoringReady" not in {c.type for c in no_registry.conditions}


def _with_report(report: ProviderReport | None, *, enabled: bool = True) -> DeploymentObservation:
    return DeploymentObservation(
        generation=1,
        agents=(AgentSummary(True, True),),
        registry_enabled=enabled,
        registry=UP if enabled else None,
        registry_url="http://r",
        monitoring_enabled=False,
        monitoring_crd_present=False,
        providers=("vllm", "spare"),
        provider_report=report,
    )


VLLM_OK = ProviderCheck(
    "vllm", "openai", "ok", "openai provider 'vllm': model 'qwen3-8b' available", ("qwen3-8b",)
)
SPARE_BAD = ProviderCheck(
    "spare", "anthropic", "error", "anthropic provider 'spare': HTTP 401: invalid x-api-key"
)


def test_provider_checks_show_in_status_and_a_failure_never_blocks_ready() -> None:
    status = deployment_status(
        _with_report(ProviderReport((VLLM_OK, SPARE_BAD))), PallasDeploymentStatus(), T0
    )
    assert [p.to_wire() for p in status.providers] == [
        {"name": "spare", "type": "anthropic", "status": "error", "message": SPARE_BAD.message,
         "checkedAt": T0, "models": []},
        {"name": "vllm", "type": "openai", "status": "ok", "message": VLLM_OK.message,
         "checkedAt": T0, "models": ["qwen3-8b"]},
    ]  # fmt: skip
    assert _cond(status, "ProvidersHealthy") == ("False", "ProviderCheckFailed")
    assert "HTTP 401: invalid x-api-key" in next(
        c.message for c in status.conditions if c.type == "ProvidersHealthy"
    )
    assert _cond(status, "Ready") == ("True", "AllAgentsReady")  # warn-only, as the seed's preflight


def test_provider_checked_at_moves_only_when_its_result_does() -> None:
    first = deployment_status(
        _with_report(ProviderReport((VLLM_OK, SPARE_BAD))), PallasDeploymentStatus(), T0
    )
    spare_ok = ProviderCheck("spare", "anthropic", "ok", "anthropic provider 'spare': answers")
    second = deployment_status(_with_report(ProviderReport((VLLM_OK, spare_ok))), first, T1)
    assert {p.name: p.checked_at for p in second.providers} == {"spare": T1, "vllm": T0}
    assert _cond(second, "ProvidersHealthy") == ("True", "ProvidersOk")
    # The same report again: the same status, so nothing is written.
    assert deployment_status(_with_report(ProviderReport((VLLM_OK, spare_ok))), second, T2) == second


def test_without_a_report_the_last_checks_stand_and_the_condition_says_why() -> None:
    first = deployment_status(
        _with_report(ProviderReport((VLLM_OK, SPARE_BAD))), PallasDeploymentStatus(), T0
    )
    unread = deployment_status(
        _with_report(ProviderReport(None, "GET http://r/healthz: ConnectError")), first, T1
    )
    assert unread.providers == first.providers
    assert _cond(unread, "ProvidersHealthy") == ("False", "ProviderCheckFailed")
    partial = deployment_status(_with_report(ProviderReport((VLLM_OK,))), PallasDeploymentStatus(), T0)
    assert _cond(partial, "ProvidersHealthy") == ("Unknown", "ProvidersNotChecked")
    never = deployment_status(_with_report(None), PallasDeploymentStatus(), T0)
    assert (never.providers, _cond(never, "ProvidersHealthy")) == ([], ("Unknown", "ProvidersNotChecked"))
    disabled = deployment_status(_with_report(None, enabled=False), first, T1)
    assert (disabled.providers, _cond(disabled, "ProvidersHealthy")) == ([], ("Unknown", "RegistryDisabled"))


def test_the_agent_budgets_spend_is_carried_into_status_and_is_a_change_of_result() -> None:
    spend = SpendReport(
        window="day", tokens=120, cost=0.5, token_limit=1000, resets_at="2026-11-22T00:00:00Z"
    )
    first = agent_status(
        AgentObservation(1, workload=UP, verification=VERIFIED, health=HealthResult("ok", spend=spend)),
        EMPTY,
        T0,
    )
    assert first.health is not None
    assert first.to_wire()["health"]["spend"] == {
        "window": "day", "tokens": 120, "cost": 0.5, "tokenLimit": 1000, "resetsAt": "2026-11-22T00:00:00Z",
    }  # fmt: skip
    more = spend.model_copy(update={"tokens": 130})
    later = agent_status(AgentObservation(1, workload=UP, health=HealthResult("ok", spend=more)), first, T1)
    assert later.health is not None
    assert (later.health.spend, later.health.checked_at) == (more, T1)
    same = agent_status(AgentObservation(1, workload=UP, health=HealthResult("ok", spend=more)), later, T2)
    assert same.health == later.health
