"""`reconcile_trigger` on the in-memory world and cluster: conditions, firing, and a restart.

The agent's call is scripted (the real MCP call is tested under `pallas run`,
tests/integration/runtime/test_run_triggers.py); the schedule, the records and the status writes
are the operator's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pallas_api import conditions, names
from pallas_io.triggers.call import Answer
from pallas_operator.engine.context import Operator
from pallas_operator.engine.triggers import TriggerRunners
from pallas_operator.reconcile.trigger import reconcile_trigger
from tests.support.fake_cluster import FakeCluster, condition, operator_with
from tests.support.operator import Manifest, agent, at, deployment, spec, trigger

NS = "default"
URL = "http://research.default.svc:8000/mcp"


class Agent:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.headers: list[Mapping[str, str]] = []

    async def __call__(
        self, url: str, message: str, conversation: str, headers: Mapping[str, str], caller: str
    ) -> Answer:
        self.calls.append((url, message, caller))
        self.headers.append(dict(headers))
        return Answer("done", conversation, 7, 0.001)


def ready_agent() -> Manifest:
    return agent("research", at("status", {"url": URL}))


def every_second(*mods: Callable[[Manifest], None]) -> Manifest:
    return trigger("nightly", at("spec.schedule", {"cron": "@every 1s"}), *mods)


def scripted(op: Operator, cluster: FakeCluster) -> Agent:
    called = Agent()
    op.triggers = TriggerRunners(cluster, op.metrics.triggers, call=called)
    return called


def trigger_statuses(cluster: FakeCluster) -> list[dict[str, Any]]:
    return [status for key, status in cluster.statuses if key[0] == names.TRIGGER_KIND]


async def fired(op: Operator, cluster: FakeCluster) -> Agent:
    """Reconcile the trigger `nightly`, wait for its first call to the agent, stop it."""
    called = scripted(op, cluster)
    try:
        await reconcile_trigger(op, NS, "nightly")
        await until(lambda: len(called.calls) >= 1)
    finally:
        await op.triggers.close()
    return called


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_trigger_of_a_missing_agent_is_not_accepted_and_an_event_says_why() -> None:
    op, cluster = operator_with(deployment(), trigger())
    await reconcile_trigger(op, NS, "nightly")
    [status] = trigger_statuses(cluster)
    accepted = condition(status, conditions.ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("False", conditions.AGENT_NOT_FOUND)
    assert condition(status, conditions.READY)["reason"] == conditions.NOT_ACCEPTED
    [event] = cluster.events
    assert (event.kind, event.reason, event.warning) == (names.TRIGGER_KIND, conditions.AGENT_NOT_FOUND, True)
    assert op.triggers.engine((NS, "nightly")) is None


async def test_an_agent_without_a_url_yet_holds_the_trigger_back() -> None:
    op, cluster = operator_with(deployment(), agent(), trigger())
    await reconcile_trigger(op, NS, "nightly")
    [status] = trigger_statuses(cluster)
    assert condition(status, conditions.ACCEPTED)["status"] == "True"
    assert condition(status, conditions.READY)["reason"] == conditions.AGENT_NOT_READY


async def test_webhook_triggers_are_accepted_but_not_served_here() -> None:
    webhook = {"signature": "github", "secretRef": {"name": "gh", "key": "secret"}}
    hook = trigger("hook", at("spec", {"agent": "research", "message": "{{ .body.x }}", "webhook": webhook}))
    op, cluster = operator_with(deployment(), ready_agent(), hook)
    await reconcile_trigger(op, NS, "hook")
    [status] = trigger_statuses(cluster)
    assert condition(status, conditions.READY)["reason"] == conditions.SOURCE_NOT_RUN
    assert op.triggers.engine((NS, "hook")) is None


async def test_a_schedule_fires_records_each_run_and_posts_an_event() -> None:
    op, cluster = operator_with(deployment(), ready_agent(), every_second())
    called = scripted(op, cluster)
    try:
        await reconcile_trigger(op, NS, "nightly")
        await until(lambda: any(e.reason == "RunSucceeded" for e in cluster.events))
    finally:
        await op.triggers.close()
    assert called.calls[0][0] == URL
    assert called.calls[0][2] == "trigger:default/nightly"
    written = trigger_statuses(cluster)
    assert condition(written[0], conditions.READY)["reason"] == conditions.SCHEDULED
    outcomes = [[r["outcome"] for r in s.get("runs", [])] for s in written]
    first_running = next(i for i, o in enumerate(outcomes) if "Running" in o)
    first_done = next(i for i, o in enumerate(outcomes) if "Succeeded" in o)
    assert first_running < first_done  # on record before the agent was called
    done = next(s for s in reversed(written) if any(r["outcome"] == "Succeeded" for r in s["runs"]))
    run = next(r for r in done["runs"] if r["outcome"] == "Succeeded")
    assert (run["tokens"], run["answerExcerpt"]) == (7, "done")
    assert done["nextRunTime"]
    assert condition(done, conditions.READY)["status"] == "True"  # the engine's writes keep conditions
    runs = op.metrics.registry.get_sample_value(
        "pallas_trigger_runs_total", {"trigger": "default/nightly", "outcome": "Succeeded"}
    )
    assert runs is not None
    assert runs >= 1


async def test_after_a_restart_a_run_left_running_is_closed_and_missed_times_follow_cronjob() -> None:
    """The operator died mid-run at T-10s; a run every 2 s; it comes back at T."""
    now = datetime.now(UTC)
    last = (now - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    left = {
        "lastScheduleTime": last,
        "runs": [{"id": "old", "outcome": "Running", "startTime": last}],
    }
    manifest = trigger(
        "nightly",
        at("spec.schedule", {"cron": "@every 2s"}),
        spec(startingDeadlineSeconds=60),
        at("status", left),
    )
    op, cluster = operator_with(deployment(), ready_agent(), manifest)
    called = await fired(op, cluster)
    final = trigger_statuses(cluster)[-1]
    old = next(r for r in final["runs"] if r["id"] == "old")
    assert (old["outcome"], old["reason"]) == ("Failed", "Interrupted")
    # Four or five times passed while it was down: the newest ran, the others were skipped.
    assert final["skippedRuns"] in (3, 4)
    assert len(called.calls) >= 1


async def test_a_deleted_trigger_stops_firing() -> None:
    op, cluster = operator_with(deployment(), ready_agent(), every_second())
    scripted(op, cluster)
    await reconcile_trigger(op, NS, "nightly")
    assert op.triggers.engine((NS, "nightly")) is not None
    op.world.record(names.TRIGGER_KIND, every_second(), deleted=True)
    await reconcile_trigger(op, NS, "nightly")
    assert op.triggers.engine((NS, "nightly")) is None


async def test_suspending_stops_the_schedule_and_keeps_the_runs_in_status() -> None:
    op, cluster = operator_with(deployment(), ready_agent(), every_second())
    called = scripted(op, cluster)
    await reconcile_trigger(op, NS, "nightly")
    await until(lambda: len(called.calls) >= 1)
    await until(lambda: not op.triggers.engine((NS, "nightly")).running())  # type: ignore[union-attr]
    suspended = every_second(spec(suspend=True), at("metadata.generation", 2))
    op.world.record(names.TRIGGER_KIND, suspended)
    await reconcile_trigger(op, NS, "nightly")
    assert op.triggers.engine((NS, "nightly")) is None
    last = trigger_statuses(cluster)[-1]
    assert condition(last, conditions.READY)["reason"] == conditions.SUSPENDED
    assert any(r["outcome"] == "Succeeded" for r in last["runs"])


async def test_runs_to_kubernetes_mode_agents_carry_the_deployments_agents_token() -> None:
    checked = deployment("ouranos", at("spec.auth", {"mode": "kubernetes"}))
    op, cluster = operator_with(checked, ready_agent(), every_second())
    called = await fired(op, cluster)
    assert called.headers[0] == {"Authorization": "Bearer token-of-default-ouranos-agents"}
    assert cluster.tokens[0] == (NS, names.agents_service_account("ouranos"))


async def test_runs_to_open_agents_carry_no_credential() -> None:
    op, cluster = operator_with(deployment(), ready_agent(), every_second())
    called = await fired(op, cluster)
    assert called.headers[0] == {}
