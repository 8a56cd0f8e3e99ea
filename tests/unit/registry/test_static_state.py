"""The static source's pure parts: spec → state, probe results → phases, health parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pallas_api.health import HealthReport
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_io.probe import ProbeOutcome
from pallas_registry.builder import build_response
from pallas_registry.state import HealthView
from pallas_registry.static import LocalAgent, Observation, base_state, observation, observed_state
from tests.support.registry import assert_valid_entry

NOW = datetime(2026, 11, 21, 10, tzinfo=UTC)

DEPLOYMENT = PallasDeploymentSpec.model_validate(
    {
        "version": "3.0.0",
        "model": {
            "default": "vllm.qwen3-8b",
            "capabilities": {"vision": True},
            "models": {"anthropic.claude-sonnet-4-5": {"contextWindow": 200000, "maxOutputTokens": 64000}},
        },
        "providers": {"vllm": {"type": "openai"}, "anthropic": {"type": "anthropic"}},
        "registry": {"namePrefix": "ca.helu.ouranos", "publicURLTemplate": "https://public/{agent}/mcp"},
    }
)


def local(name: str = "research", **spec: object) -> LocalAgent:
    agent_spec = PallasAgentSpec.model_validate({"deployment": "ouranos", **spec})
    return LocalAgent(name, agent_spec, DEPLOYMENT, "http://127.0.0.1:24201/mcp", "ouranos", "agents")


def test_base_state_from_the_manifests() -> None:
    state = base_state(
        local(title="Research", capabilities=["web-search"], model="anthropic.claude-sonnet-4-5")
    )
    assert state.key == ("agents", "research")
    assert (state.title, state.tags, state.version) == ("Research", ("web-search",), "3.0.0")
    assert (state.model_ref, state.provider.type) == ("anthropic.claude-sonnet-4-5", "anthropic")
    # The agent's own model's capabilities, not the default model's.
    assert state.model_capabilities.model_dump() == {
        "vision": False,
        "context_window": 200000,
        "max_output_tokens": 64000,
        "price": None,
    }
    assert base_state(local()).model_capabilities.vision  # the default model's
    undeclared = base_state(local(model="vllm.llama-3-70b")).model_capabilities
    assert (undeclared.vision, undeclared.context_window, undeclared.max_output_tokens) == (
        False,
        131072,
        16384,
    )
    assert (state.phase, state.ready) == ("Pending", False)
    # Local agents are published at their loopback URL, never the cluster's public template.
    assert state.public_url_template == ""
    assert build_response(state)["server"]["remotes"][0]["url"] == "http://127.0.0.1:24201/mcp"
    assert build_response(state)["server"]["name"] == "ca.helu.ouranos/research"


def test_relative_icons_resolve_against_the_local_registry() -> None:
    agent = local(icons=[{"src": "/icons/r.svg", "sizes": ["any"]}])
    icons = build_response(base_state(agent, "http://127.0.0.1:24200/"))["server"]["icons"]
    assert icons == [{"src": "http://127.0.0.1:24200/icons/r.svg", "sizes": ["any"]}]


def seen(status: str, message: str = "", tools: tuple[str, ...] = ("get_health",)) -> Observation:
    return Observation(True, HealthView(status, message, NOW), tools)  # type: ignore[arg-type]


DOWN = Observation(False, HealthView("error", "unreachable: ConnectError", NOW))


@pytest.mark.parametrize(
    ("observation", "phase", "ready"),
    [
        (seen("ok"), "Ready", True),
        (seen("degraded", "slow"), "Degraded", True),
        (seen("error", "no key"), "Degraded", False),
    ],
)
def test_probe_results_map_to_phases(observation: Observation, phase: str, ready: bool) -> None:
    state = observed_state(base_state(local()), observation, NOW)
    assert (state.phase, state.ready) == (phase, ready)
    assert state.updated_at == NOW
    assert_valid_entry(build_response(state))


def test_unreachable_before_first_answer_is_pending_after_it_failed() -> None:
    start = base_state(local())
    assert observed_state(start, DOWN, NOW).phase == "Pending"
    up = observed_state(start, seen("ok"), NOW)
    down = observed_state(up, DOWN, NOW + timedelta(seconds=5))
    assert (down.phase, down.ready, down.tools) == ("Failed", False, ("get_health",))
    assert down.status_message == "unreachable: ConnectError"
    assert down.ready_changed_at == NOW + timedelta(seconds=5)


def test_an_unchanged_report_does_not_move_timestamps() -> None:
    first = observed_state(base_state(local()), seen("ok"), NOW)
    later = observed_state(
        first, Observation(True, HealthView("ok", "", NOW + timedelta(minutes=1)), ("get_health",)), NOW
    )
    assert later == first


def report(status: str, message: str | None = None, timestamp: str = "2026-11-21T09:00:00Z") -> HealthReport:
    return HealthReport(status=status, message=message, timestamp=timestamp)  # type: ignore[arg-type]


def test_a_readable_report_is_shown_with_its_own_time() -> None:
    outcome = ProbeOutcome(ok=True, tools=("get_health",), health=report("degraded", "argos down"))
    assert observation(outcome, NOW) == Observation(
        True, HealthView("degraded", "argos down", NOW - timedelta(hours=1)), ("get_health",)
    )


def test_an_unreadable_report_is_an_error_naming_why() -> None:
    outcome = ProbeOutcome(ok=True, health_problem="get_health did not return a health report (status: …)")
    seen_ = observation(outcome, NOW)
    assert seen_.reachable
    assert (seen_.health.status, seen_.health.message) == (
        "error",
        "get_health did not return a health report (status: …)",
    )


def test_an_unreachable_agent_says_why() -> None:
    seen_ = observation(ProbeOutcome(ok=False, message="connection refused"), NOW)
    assert (seen_.reachable, seen_.health.message) == (False, "unreachable: connection refused")


def test_a_report_with_a_bad_timestamp_is_dated_now() -> None:
    outcome = ProbeOutcome(ok=True, health=report("ok", timestamp="soon"))
    assert observation(outcome, NOW).health.checked_at == NOW
