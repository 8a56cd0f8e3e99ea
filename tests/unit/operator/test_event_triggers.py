"""Event triggers in the operator, on the in-memory cluster: events in, runs out.

The watch is `FakeCluster.watch_objects` (a list, then what a test `emit`s); the matcher, the run
engine, the status writes and the Events are the operator's own. The agent's call is scripted
(the real MCP call is tested under `pallas run`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from pallas_api import conditions, names
from pallas_api.triggers.event import EventKind
from pallas_io.triggers.call import Answer
from pallas_operator.engine import event_watches
from pallas_operator.engine.context import Operator
from pallas_operator.engine.triggers import TriggerRunners
from pallas_operator.reconcile.trigger import reconcile_trigger
from tests.support import waiting
from tests.support.fake_cluster import FakeCluster, condition, operator_with
from tests.support.operator import Manifest, agent, at, deployment, trigger

NS = "default"
URL = "http://research.default.svc:8000/mcp"
PODS = EventKind("", "pods")
CRASHING = "object.status.containerStatuses.exists(c, c.restartCount > 1)"


class Agent:
    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.messages: list[str] = []
        self._hold = hold

    async def __call__(
        self, url: str, message: str, conversation: str, headers: Mapping[str, str], caller: str
    ) -> Answer:
        self.messages.append(message)
        if self._hold is not None:
            await self._hold.wait()
        return Answer(f"looked at: {message}", conversation, 5, 0.0)


def on_pods(name: str = "crashes", spec_fields: Mapping[str, Any] | None = None, **event: Any) -> Manifest:
    spec = {
        "agent": "research",
        "message": "Pod {{ .object.metadata.name }} is {{ .reason }} ({{ .type }})",
        "event": {"apiVersion": "v1", "kind": "Pod", "when": CRASHING, **event},
        **(spec_fields or {}),
    }
    return trigger(name, at("spec", spec))


def pod(name: str, restarts: int, labels: Mapping[str, str] | None = None, namespace: str = NS) -> Manifest:
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}} if restarts else {"running": {}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "status": {"containerStatuses": [{"name": "main", "restartCount": restarts, "state": waiting}]},
    }


def world(
    *bodies: Manifest, hold: asyncio.Event | None = None, **settings: Any
) -> tuple[Operator, FakeCluster, Agent]:
    ready = agent("research", at("status", {"url": URL}))
    op, cluster = operator_with(deployment(), ready, *bodies, **{"event_kinds": (PODS,), **settings})
    called = Agent(hold)
    op.triggers = TriggerRunners(cluster, op.metrics.triggers, call=called, namespaces=op.settings.namespaces)
    return op, cluster, called


def statuses(cluster: FakeCluster, name: str) -> list[dict[str, Any]]:
    return [s for key, s in cluster.statuses if key == (names.TRIGGER_KIND, NS, name)]


def newest(cluster: FakeCluster, name: str) -> dict[str, Any]:
    return ([{}, *statuses(cluster, name)])[-1]


async def until(check: Callable[[], bool]) -> None:
    await waiting.until("the condition", check, 5.0, interval=0.01)


async def settle() -> None:
    """Let the watch task hand every emitted event on."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_matching_event_runs_the_agent_and_the_answer_is_in_status() -> None:
    op, cluster, called = world(on_pods())
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: cluster.watching() == [("pods", NS)])
        cluster.emit("ADDED", pod("web-1", 0))  # when is false: no run
        cluster.emit("MODIFIED", pod("web-1", 2))
        await until(lambda: any(e.reason == "RunSucceeded" for e in cluster.events))
    finally:
        await op.triggers.close()
    assert called.messages == ["Pod web-1 is CrashLoopBackOff (MODIFIED)"]
    last = statuses(cluster, "crashes")[-1]
    [run] = last["runs"]
    assert (run["outcome"], run["answerExcerpt"]) == (
        "Succeeded",
        "looked at: Pod web-1 is CrashLoopBackOff (MODIFIED)",
    )
    ready = condition(last, conditions.READY)
    assert (ready["status"], ready["reason"]) == ("True", conditions.WATCHING)
    assert "pods in default" in ready["message"]
    runs = op.metrics.registry.get_sample_value(
        "pallas_trigger_runs_total", {"trigger": "default/crashes", "outcome": "Succeeded"}
    )
    assert runs == 1


async def test_objects_there_before_the_trigger_do_not_fire_on_the_initial_list() -> None:
    op, cluster, called = world(on_pods(types=["ADDED", "MODIFIED"]), pod("old", 5))
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: cluster.watching() == [("pods", NS)])
        await settle()
        assert called.messages == []  # listed, not added
        cluster.emit("ADDED", pod("new", 3))
        await until(lambda: len(called.messages) == 1)
    finally:
        await op.triggers.close()
    assert called.messages == ["Pod new is CrashLoopBackOff (ADDED)"]


async def test_namespace_labels_and_types_filter_before_the_condition() -> None:
    selector = {"matchLabels": {"tier": "web"}}
    op, cluster, called = world(on_pods(labelSelector=selector, types=["MODIFIED"]), namespaces=())
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: cluster.watching() == [("pods", "*")])  # the operator watches every namespace
        cluster.emit("MODIFIED", pod("db", 4, {"tier": "db"}))  # other labels
        cluster.emit("MODIFIED", pod("web", 4, {"tier": "web"}, namespace="other"))  # other namespace
        cluster.emit("DELETED", pod("gone", 4, {"tier": "web"}))  # a type not asked for
        cluster.emit("MODIFIED", pod("web", 4, {"tier": "web"}))
        await until(lambda: len(called.messages) == 1)
        await settle()
    finally:
        await op.triggers.close()
    assert called.messages == ["Pod web is CrashLoopBackOff (MODIFIED)"]


async def test_a_flood_is_bounded_by_max_runs_per_minute_and_the_rest_counted_dropped() -> None:
    flood = on_pods(spec_fields={"concurrencyPolicy": "Allow", "maxRunsPerMinute": 3})
    op, cluster, called = world(flood)
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: bool(cluster.watching()))
        for i in range(10):
            cluster.emit("MODIFIED", pod(f"web-{i}", 2))
        await until(lambda: newest(cluster, "crashes").get("droppedRuns") == 7)
        await op.triggers.engine((NS, "crashes")).wait_idle()  # type: ignore[union-attr]
    finally:
        await op.triggers.close()
    assert len(called.messages) == 3
    dropped = op.metrics.registry.get_sample_value(
        "pallas_trigger_dropped_total", {"trigger": "default/crashes", "reason": "rate"}
    )
    assert dropped == 7


async def test_forbid_skips_events_while_a_run_is_in_flight() -> None:
    hold = asyncio.Event()
    op, cluster, called = world(on_pods(), hold=hold)  # concurrencyPolicy Forbid, the default
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: bool(cluster.watching()))
        cluster.emit("MODIFIED", pod("web", 2))
        await until(lambda: len(called.messages) == 1)
        cluster.emit("MODIFIED", pod("web", 3))
        await until(lambda: newest(cluster, "crashes").get("skippedRuns") == 1)
        hold.set()
    finally:
        await op.triggers.close()
    assert len(called.messages) == 1


async def test_a_kind_the_chart_does_not_allow_is_not_accepted_and_names_the_value() -> None:
    deployments = trigger(
        "rollouts",
        at(
            "spec",
            {
                "agent": "research",
                "message": "{{ .type }}",
                "event": {"apiVersion": "apps/v1", "kind": "Deployment"},
            },
        ),
    )
    op, cluster, _ = world(deployments)
    await reconcile_trigger(op, NS, "rollouts")
    [status] = statuses(cluster, "rollouts")
    accepted = condition(status, conditions.ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("False", conditions.EVENT_KIND_NOT_ALLOWED)
    assert "Deployment (apps/deployments)" in accepted["message"]
    assert '{apiGroup: "apps", resource: deployments}' in accepted["message"]
    assert "triggers.eventKinds" in accepted["message"]
    [event] = cluster.events
    assert event.reason == conditions.EVENT_KIND_NOT_ALLOWED
    assert cluster.watches_opened == []
    assert op.triggers.engine((NS, "rollouts")) is None


async def test_a_namespace_the_operator_does_not_watch_is_not_accepted() -> None:
    op, cluster, _ = world(on_pods(namespace="elsewhere"))
    await reconcile_trigger(op, NS, "crashes")
    [status] = statuses(cluster, "crashes")
    accepted = condition(status, conditions.ACCEPTED)
    assert accepted["reason"] == conditions.EVENT_KIND_NOT_ALLOWED
    assert "'elsewhere'" in accepted["message"]
    assert cluster.watches_opened == []


async def test_one_watch_per_kind_is_shared_and_stops_with_the_last_trigger() -> None:
    op, cluster, called = world(on_pods("first"), on_pods("second"))
    try:
        await reconcile_trigger(op, NS, "first")
        await reconcile_trigger(op, NS, "second")
        await until(lambda: bool(cluster.watching()))
        assert cluster.watching() == [("pods", NS)]
        cluster.emit("MODIFIED", pod("web", 2))
        await until(lambda: len(called.messages) == 2)  # one event, both triggers
        first = cluster.objects.pop((names.TRIGGER_KIND, NS, "first"))
        op.world.record(names.TRIGGER_KIND, first, deleted=True)
        await reconcile_trigger(op, NS, "first")
        await settle()
        assert cluster.watching() == [("pods", NS)]  # the second still needs it
        op.world.record(names.TRIGGER_KIND, cluster.objects[(names.TRIGGER_KIND, NS, "second")], deleted=True)
        await reconcile_trigger(op, NS, "second")
        await until(lambda: cluster.watching() == [])
    finally:
        await op.triggers.close()
    assert len(cluster.watches_opened) == 1
    assert op.triggers.watches.watching() == set()


async def test_a_watch_that_fails_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_watches, "RESTART_SECONDS", 0.01)
    op, cluster, called = world(on_pods())
    cluster.broken_watches = 1
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: len(cluster.watches_opened) == 2 and bool(cluster.watching()))
        cluster.emit("MODIFIED", pod("web", 2))
        await until(lambda: len(called.messages) == 1)
    finally:
        await op.triggers.close()


@pytest.mark.parametrize("spec_change", [{"suspend": True}])
async def test_a_suspended_event_trigger_stops_its_watch(spec_change: dict[str, Any]) -> None:
    op, cluster, _ = world(on_pods())
    try:
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: bool(cluster.watching()))
        body = cluster.objects[(names.TRIGGER_KIND, NS, "crashes")]
        body["spec"].update(spec_change)
        body["metadata"]["generation"] = 2
        op.world.record(names.TRIGGER_KIND, body)
        await reconcile_trigger(op, NS, "crashes")
        await until(lambda: cluster.watching() == [])
    finally:
        await op.triggers.close()
    assert condition(statuses(cluster, "crashes")[-1], conditions.READY)["reason"] == conditions.SUSPENDED


async def test_a_trigger_made_before_its_agent_had_a_url_says_watching_once_it_has_one() -> None:
    # The engine starts with the conditions the reconcile computed, so they are no change to it:
    # yet the API's copy still says AgentNotReady and must be written once (no run writes it).
    op, cluster = operator_with(deployment(), agent("research"), on_pods(), event_kinds=(PODS,))
    op.triggers = TriggerRunners(
        cluster, op.metrics.triggers, call=Agent(), namespaces=op.settings.namespaces
    )
    try:
        await reconcile_trigger(op, NS, "crashes")
        ready = condition(newest(cluster, "crashes"), conditions.READY)
        assert (ready["status"], ready["reason"]) == ("False", conditions.AGENT_NOT_READY)
        op.world.record(names.AGENT_KIND, agent("research", at("status", {"url": URL})))
        await reconcile_trigger(op, NS, "crashes")
        await until(
            lambda: condition(newest(cluster, "crashes"), conditions.READY)["reason"] == conditions.WATCHING
        )
        writes = len(statuses(cluster, "crashes"))
        # The watch shows the written status; a reconcile of the unchanged trigger writes nothing.
        op.world.record(names.TRIGGER_KIND, cluster.objects[(names.TRIGGER_KIND, NS, "crashes")])
        await reconcile_trigger(op, NS, "crashes")
        await settle()
        assert len(statuses(cluster, "crashes")) == writes
    finally:
        await op.triggers.close()
