"""A trigger's runs: concurrency policies, the per-minute bound, failures and what status keeps.

The agent call is a scripted coroutine here (the real MCP call is tested under `pallas run`,
tests/integration/runtime/test_run_triggers.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from pallas_api.spec import PallasTriggerSpec
from pallas_api.status import PallasTriggerStatus, TriggerRun
from pallas_io.triggers.call import Answer, RunFailed
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget
from pallas_runtime.metrics import RuntimeMetrics


class Agent:
    """A scripted agent: each call waits for `release` (if set) and answers or fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.release: asyncio.Event | None = None
        self.fail: RunFailed | None = None
        self.seen_running_first: list[bool] = []
        self.statuses: list[PallasTriggerStatus] = []

    def on_change(self, status: PallasTriggerStatus) -> None:
        self.statuses.append(status)

    async def __call__(
        self, url: str, message: str, conversation: str, headers: Mapping[str, str], caller: str
    ) -> Answer:
        # The run must be on record as Running before the agent hears of it.
        self.seen_running_first.append(any(r.outcome == "Running" for r in self.statuses[-1].runs))
        self.calls.append((message, conversation, caller))
        if self.release is not None:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return Answer(f"answer to {message}" * 100, conversation, 42, 0.0125)


def engine(agent: Agent, metrics: RuntimeMetrics | None = None, **spec: Any) -> TriggerEngine:
    body = {"agent": "triage", "message": "check {{ .body.what }}", "webhook": _WEBHOOK, **spec}
    target = TriggerTarget("ns", "t", PallasTriggerSpec.model_validate(body), "http://agent/mcp")
    metrics = metrics or RuntimeMetrics(process_collectors=False)
    return TriggerEngine(target, metrics.triggers, on_change=agent.on_change, call=agent)


_WEBHOOK = {"signature": "bearer", "secretRef": {"name": "s", "key": "k"}}


def counter(metrics: RuntimeMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_run_is_recorded_running_then_succeeded_with_what_it_spent() -> None:
    agent = Agent()
    metrics = RuntimeMetrics(process_collectors=False)
    runs = engine(agent, metrics)
    fired = await runs.fire({"body": {"what": "disk"}})
    assert fired.fired == "started"
    await runs.wait_idle()
    assert agent.seen_running_first == [True]
    assert agent.calls == [("check disk", "trigger-t-" + fired.run.id, "trigger:ns/t")]  # type: ignore[union-attr]
    [run] = runs.status.runs
    assert (run.outcome, run.tokens, run.cost) == ("Succeeded", 42, 0.0125)
    assert run.answer_excerpt is not None
    assert len(run.answer_excerpt) == 512
    assert runs.status.last_run_time == run.start_time
    assert counter(metrics, "pallas_trigger_runs_total", trigger="ns/t", outcome="Succeeded") == 1


async def test_forbid_skips_while_a_run_is_in_flight() -> None:
    agent = Agent()
    agent.release = asyncio.Event()
    metrics = RuntimeMetrics(process_collectors=False)
    runs = engine(agent, metrics, concurrencyPolicy="Forbid")
    assert (await runs.fire({"body": {"what": "a"}})).fired == "started"
    assert (await runs.fire({"body": {"what": "b"}})).fired == "skipped"
    agent.release.set()
    await runs.wait_idle()
    assert [c[0] for c in agent.calls] == ["check a"]
    assert runs.status.skipped_runs == 1
    assert counter(metrics, "pallas_trigger_dropped_total", trigger="ns/t", reason="skipped") == 1


async def test_allow_runs_side_by_side() -> None:
    agent = Agent()
    agent.release = asyncio.Event()
    runs = engine(agent, concurrencyPolicy="Allow")
    await runs.fire({"body": {"what": "a"}})
    await runs.fire({"body": {"what": "b"}})
    await asyncio.sleep(0)
    assert runs.running() == 2
    agent.release.set()
    await runs.wait_idle()
    assert [r.outcome for r in runs.status.runs] == ["Succeeded", "Succeeded"]


async def test_replace_stops_the_run_in_flight_and_records_why() -> None:
    agent = Agent()
    agent.release = asyncio.Event()
    runs = engine(agent, concurrencyPolicy="Replace")
    first = await runs.fire({"body": {"what": "a"}})
    await asyncio.sleep(0)
    second = await runs.fire({"body": {"what": "b"}})
    agent.release.set()
    await runs.wait_idle()
    by_id = {r.id: r for r in runs.status.runs}
    assert by_id[first.run.id].outcome == "Failed"  # type: ignore[union-attr]
    assert by_id[first.run.id].reason == "Replaced"  # type: ignore[union-attr]
    assert by_id[second.run.id].outcome == "Succeeded"  # type: ignore[union-attr]


async def test_max_runs_per_minute_drops_the_rest() -> None:
    agent = Agent()
    metrics = RuntimeMetrics(process_collectors=False)
    runs = engine(agent, metrics, concurrencyPolicy="Allow", maxRunsPerMinute=2)
    fired = [(await runs.fire({"body": {"what": str(i)}})).fired for i in range(5)]
    await runs.wait_idle()
    assert fired == ["started", "started", "dropped", "dropped", "dropped"]
    assert runs.status.dropped_runs == 3
    assert counter(metrics, "pallas_trigger_dropped_total", trigger="ns/t", reason="rate") == 3


async def test_a_template_that_does_not_render_is_a_failed_run_naming_the_variable() -> None:
    agent = Agent()
    runs = engine(agent)
    fired = await runs.fire({"body": {"other": 1}})
    assert fired.fired == "failed"
    assert agent.calls == []
    [run] = runs.status.runs
    assert (run.outcome, run.reason) == ("Failed", "TemplateFailed")
    assert run.message == ".body.what: .body.what is not there"


async def test_an_agent_error_and_a_timeout_are_failed_runs() -> None:
    agent = Agent()
    agent.fail = RunFailed("AgentError", "BUDGET_EXCEEDED: the caller budget is spent")
    runs = engine(agent)
    await runs.fire({"body": {"what": "a"}})
    await runs.wait_idle()
    assert (runs.status.runs[0].reason, runs.status.runs[0].message) == (
        "AgentError",
        "BUDGET_EXCEEDED: the caller budget is spent",
    )
    slow = Agent()
    slow.release = asyncio.Event()
    runs = engine(slow, timeoutSeconds=1)
    await runs.fire({"body": {"what": "a"}})
    await runs.wait_idle()
    assert runs.status.runs[0].reason == "Timeout"


async def test_history_keeps_the_last_runs_of_each_outcome() -> None:
    agent = Agent()
    runs = engine(agent, concurrencyPolicy="Allow", historyLimit={"succeeded": 2, "failed": 1})
    for i in range(4):
        await runs.fire({"body": {"what": str(i)}})
        await runs.wait_idle()
    await runs.fire({"body": {}})
    await runs.fire({"body": {}})
    assert [r.outcome for r in runs.status.runs].count("Succeeded") == 2
    assert [r.outcome for r in runs.status.runs].count("Failed") == 1


async def test_continue_speaks_in_one_conversation() -> None:
    agent = Agent()
    runs = engine(agent, conversation={"mode": "continue"})
    for _ in range(2):
        await runs.fire({"body": {"what": "a"}})
        await runs.wait_idle()
    assert len({c[1] for c in agent.calls}) == 1
    named = engine(Agent(), conversation={"mode": "continue", "id": "ops-log"})
    await named.fire({"body": {"what": "a"}})
    await named.wait_idle()
    assert named.status.runs[0].conversation_id == "ops-log"


async def test_closing_interrupts_the_runs_in_flight() -> None:
    agent = Agent()
    agent.release = asyncio.Event()
    runs = engine(agent)
    await runs.fire({"body": {"what": "a"}})
    await asyncio.sleep(0)
    await runs.close()
    assert runs.status.runs[0].reason == "Interrupted"


async def test_suspended_fires_nothing() -> None:
    agent = Agent()
    runs = engine(agent, suspend=True)
    assert (await runs.fire({"body": {"what": "a"}})).fired == "suspended"
    assert agent.calls == []


@pytest.mark.parametrize("policy", ["Allow", "Forbid", "Replace"])
def test_every_policy_is_accepted(policy: str) -> None:
    assert engine(Agent(), concurrencyPolicy=policy).target.spec.concurrency_policy == policy


async def test_a_run_another_process_left_running_is_closed_not_run_again() -> None:
    """An operator restart: status says a run was Running; the new process never repeats it."""
    left = PallasTriggerStatus(
        runs=[TriggerRun(id="old", outcome="Running", start_time="2026-12-07T06:00:00Z")],
        last_schedule_time="2026-12-07T06:00:00Z",
    )
    agent = Agent()
    runs = TriggerEngine(
        TriggerTarget("ns", "t", PallasTriggerSpec.model_validate(
            {"agent": "triage", "message": "m", "webhook": _WEBHOOK}), "http://agent/mcp"),
        RuntimeMetrics(process_collectors=False).triggers,
        call=agent,
        status=left,
    )  # fmt: skip
    [run] = runs.status.runs
    assert (run.outcome, run.reason) == ("Failed", "Interrupted")
    assert run.completion_time is not None
    assert runs.status.last_schedule_time == "2026-12-07T06:00:00Z"
    assert agent.calls == []


async def test_no_credential_is_a_failed_run_that_names_why_not_the_token() -> None:
    async def refused() -> Mapping[str, str]:
        raise RuntimeError("the TokenRequest was refused (403)")

    agent = Agent()
    runs = engine(agent)
    runs.target.credentials = refused
    await runs.fire({"body": {"what": "a"}})
    await runs.wait_idle()
    assert agent.calls == []
    [run] = runs.status.runs
    assert (run.reason, run.message) == (
        "CredentialsUnavailable",
        "no credential for the call: the TokenRequest was refused (403)",
    )
