"""A trigger's runs against a real agent whose caller budget runs out (issue 52, budget exhaustion).

The agent is served over real HTTP with a per-caller budget and thinks with the scripted
FakeOpenAI; the trigger's engine calls it with its real MCP client, as `pallas run` and the
operator do. What the budget names is the identity the agent authenticated: without a
credential that is `anonymous`, not `trigger:<namespace>/<name>` (the handshake's clientInfo is
not an identity anybody verifies; docs/triggers.md, "Identity").
"""

from __future__ import annotations

from typing import Any

from pallas_api.spec import PallasTriggerSpec
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget
from pallas_runtime.metrics import RuntimeMetrics
from tests.integration.runtime.test_budgets import agents
from tests.support.fake_llm import FakeOpenAI, FakeUsage, Text


async def test_an_exhausted_budget_records_a_failed_run_with_the_budget_error(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
    specs: dict[str, dict[str, Any]] = {"beta": {"budgets": {"perCaller": {"window": "hour", "tokens": 20}}}}
    spec = PallasTriggerSpec.model_validate(
        {
            "agent": "beta",
            "message": "check {{ .trigger.name }}",
            "webhook": {"signature": "bearer", "secretRef": {"name": "s", "key": "k"}},
            "concurrencyPolicy": "Allow",
        }
    )
    metrics = RuntimeMetrics(process_collectors=False)
    async with agents(fake_openai, specs) as served:
        engine = TriggerEngine(TriggerTarget("ops", "nightly", spec, served["beta"][0].url), metrics.triggers)
        try:
            for _ in range(3):  # 15 tokens each: the third starts with 30 of 20 spent
                await engine.fire({})
                await engine.wait_idle()
        finally:
            await engine.close()
    newest = engine.status.runs[0]
    assert [r.outcome for r in engine.status.runs] == ["Failed", "Succeeded", "Succeeded"]
    assert newest.reason == "AgentError"
    assert newest.message is not None
    assert newest.message.startswith("budget exceeded: caller anonymous spent 30 tokens of its 20 per hour")
    assert newest.tokens is None
    assert (
        metrics.registry.get_sample_value(
            "pallas_trigger_runs_total", {"trigger": "ops/nightly", "outcome": "Failed"}
        )
        == 1.0
    )
