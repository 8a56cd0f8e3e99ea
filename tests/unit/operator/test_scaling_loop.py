"""The scaling loop on the in-memory cluster: what it reads, what it writes, and when it stops.

The pods' `/metrics` are a fake reader handed to `Scaler` through the same parameter the real
one (`engine.pod_activity.read_pod`) fills; the clock is a number the test moves. The reader
against a real agent process is tests/integration/operator/test_pod_activity.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from pallas_api import names
from pallas_api.spec.common import ScalingSpec
from pallas_operator.builders.meta import agent_selector
from pallas_operator.engine.context import AGENT, Operator
from pallas_operator.engine.pod_activity import metrics_url, parse_reading
from pallas_operator.engine.scaler import SCALED_REASON, Scaler, ScaleTarget
from pallas_operator.reconcile.agent import reconcile_agent
from pallas_operator.status.scaling import NO_ACTIVATOR, SCALE_IN_STABLE_SECONDS, PodReading
from tests.support.fake_cluster import FakeCluster, operator_with
from tests.support.operator import Manifest, agent, at, deployment, spec

NS = "default"
KEY = (AGENT, NS, "research")
SCALING = {"minReplicas": 1, "maxReplicas": 4, "idleSeconds": 60, "targetInFlight": 2}


@dataclass
class Pods:
    """The fake reader: each pod IP's reading; an IP without one does not answer (unknown)."""

    readings: dict[str, PodReading] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)

    async def __call__(self, url: str, time_limit: float) -> PodReading | None:
        self.urls.append(url)
        return self.readings.get(str(urlsplit(url).hostname))


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Scaled:
    op: Operator
    cluster: FakeCluster
    pods: Pods
    clock: Clock
    notified: list[Hashable]

    async def round(self) -> Any:
        """One round of the loop, then the watch shows what it wrote."""
        decision = await self.op.scaler.round(KEY)
        self.cluster.watch(self.op.world)
        return decision

    def replicas(self) -> int:
        return int(self.cluster.objects[("Deployment", NS, "research")]["spec"]["replicas"])

    def run_pods(self, count: int, in_flight: int, last_turn_ago: float | None = 0.0) -> None:
        """`count` ready pods, each with `in_flight` turns, the last started `last_turn_ago` s ago."""
        for ip in list(self.pods.readings):
            del self.cluster.objects[("Pod", NS, f"research-{ip}")]
        self.pods.readings.clear()
        for i in range(count):
            ip = f"10.0.0.{i + 1}"
            self.cluster.load(pod(ip))
            last = None if last_turn_ago is None else self.clock.now - last_turn_ago
            self.pods.readings[ip] = PodReading(in_flight, last)


def edit(op: Operator, cluster: FakeCluster, **fields: Any) -> None:
    """The agent as stored, its spec edited (`None` removes a field), as the watch shows it."""
    body = copy.deepcopy(cluster.objects[(names.AGENT_KIND, NS, "research")])
    for name, value in fields.items():
        if value is None:
            body["spec"].pop(name, None)
        else:
            body["spec"][name] = value
    body["metadata"]["generation"] += 1
    cluster.objects[(names.AGENT_KIND, NS, "research")] = body
    op.world.record(names.AGENT_KIND, body)


def applied_deployments(cluster: FakeCluster) -> list[dict[str, Any]]:
    return [m for m in cluster.applied if m["kind"] == "Deployment"]


def pod(ip: str, ready: bool = True) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"research-{ip}", "namespace": NS, "labels": agent_selector("research")},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


async def scaled(scaling: dict[str, Any] = SCALING, *, on_deployment: bool = False) -> Scaled:
    """A scaled agent reconciled once (its Deployment created), its loop through a first round."""
    dep = deployment("ouranos", spec(scaling=scaling)) if on_deployment else deployment()
    op, cluster = operator_with(
        dep, agent("research") if on_deployment else agent("research", spec(scaling=scaling))
    )
    pods, clock, notified, decided = Pods(), Clock(), [], asyncio.Event()

    def notify(key: Hashable) -> None:
        notified.append(key)
        decided.set()

    op.scaler = Scaler(cluster, op.deployment_replicas, notify=notify, read=pods, clock=clock)
    await reconcile_agent(op, NS, "research")
    cluster.watch(op.world)
    # The loop's task makes its first round now, then pauses for seconds: the test drives on.
    async with asyncio.timeout(5):
        await decided.wait()
    cluster.watch(op.world)
    return Scaled(op, cluster, pods, clock, notified)


async def test_load_above_target_adds_every_pod_it_needs_at_once_up_to_max() -> None:
    s = await scaled()
    s.run_pods(1, in_flight=9)  # 9 turns, 2 a pod: 5 pods, but at most 4

    decision = await s.round()

    assert (decision.replicas, s.replicas()) == (4, 4)
    assert s.cluster.scaled[-1] == (NS, "research", 4)  # one write, not four
    event = s.cluster.events[-1]
    assert (event.reason, event.warning, event.name) == (SCALED_REASON, False, "research")
    assert event.message.startswith("1 → 4 pods: 9 turn(s) in flight, 2 per pod (targetInFlight)")
    assert s.pods.urls[-1] == "http://10.0.0.1:8000/metrics"  # the pod itself, at its port
    # The decision asks for a reconcile, which writes it into the status.
    assert KEY in s.notified
    await reconcile_agent(s.op, NS, "research")
    status = s.cluster.statuses[-1][1]
    assert status["replicas"] == 4
    assert status["scaling"]["desiredReplicas"] == 4
    assert "targetInFlight" in status["scaling"]["reason"]


async def test_load_ending_removes_one_pod_per_stable_period() -> None:
    s = await scaled()
    s.run_pods(1, in_flight=8)
    await s.round()
    s.run_pods(4, in_flight=0, last_turn_ago=SCALING["idleSeconds"])

    seen = []
    for _ in range(5):
        seen.append((await s.round()).replicas)  # at once: held
        s.clock.now += SCALE_IN_STABLE_SECONDS
        seen.append((await s.round()).replicas)  # a stable period later: one fewer

    assert seen == [4, 3, 3, 2, 2, 1, 1, 1, 1, 1]
    assert [r for *_, r in s.cluster.scaled[1:]] == [4, 3, 2, 1]


async def test_a_pod_that_does_not_answer_never_causes_a_scale_in() -> None:
    s = await scaled()
    s.run_pods(1, in_flight=6)
    await s.round()  # 3 pods
    s.run_pods(3, in_flight=0, last_turn_ago=600)
    del s.pods.readings["10.0.0.3"]  # ready, but its /metrics does not answer
    s.clock.now += 10 * SCALE_IN_STABLE_SECONDS

    decision = await s.round()

    assert (decision.replicas, s.replicas()) == (3, 3)
    assert "1 pod(s) did not answer /metrics" in decision.reason
    s.pods.readings.clear()  # none answers: nothing known, still nothing removed
    assert (await s.round()).replicas == 3
    # The silent pod's turns are unknown, not zero: the others' load still adds pods.
    s.pods.readings["10.0.0.1"] = PodReading(8, s.clock.now)
    assert (await s.round()).replicas == 4


async def test_min_replicas_0_is_held_at_one_pod_until_the_activator_exists() -> None:
    s = await scaled({**SCALING, "minReplicas": 0})
    assert s.replicas() == 1  # created at max(minReplicas, 1)
    s.run_pods(1, in_flight=0, last_turn_ago=3600)
    s.clock.now += 10 * SCALE_IN_STABLE_SECONDS

    decision = await s.round()

    assert (decision.replicas, decision.sleeping, s.replicas()) == (1, False, 1)
    assert decision.reason.endswith(NO_ACTIVATOR)
    assert all(replicas >= 1 for *_, replicas in s.cluster.scaled)


async def test_the_apply_leaves_replicas_to_the_loop_and_a_new_agent_starts_at_min() -> None:
    s = await scaled({**SCALING, "minReplicas": 3})

    (applied,) = applied_deployments(s.cluster)
    assert "replicas" not in applied["spec"]
    assert s.cluster.scaled == [(NS, "research", 3)]  # created, then sized by the loop's manager
    assert s.replicas() == 3
    # The loop changes them; the reconcile's next apply (an edit of the agent) keeps its value.
    s.run_pods(3, in_flight=7)
    await s.round()
    s.op.world.record(
        names.AGENT_KIND, agent("research", spec(scaling=SCALING), at("spec.description", "New"))
    )
    await reconcile_agent(s.op, NS, "research")
    assert "replicas" not in applied_deployments(s.cluster)[-1]["spec"]
    assert s.replicas() == 4
    await s.op.scaler.stop()


async def test_a_fixed_agent_turning_scaled_hands_its_replicas_over_before_the_apply_drops_them() -> None:
    op, cluster = operator_with(deployment(), agent("research", spec(replicas=3)))
    await reconcile_agent(op, NS, "research")
    cluster.watch(op.world)
    assert applied_deployments(cluster)[-1]["spec"]["replicas"] == 3
    assert cluster.scaled == []
    edit(op, cluster, replicas=None, scaling={**SCALING, "maxReplicas": 2})

    await reconcile_agent(op, NS, "research")

    # Sized by the loop's manager first (3 kept within max 2), so the apply without them leaves 2.
    assert cluster.scaled == [(NS, "research", 2)]
    assert "replicas" not in applied_deployments(cluster)[-1]["spec"]
    assert cluster.objects[("Deployment", NS, "research")]["spec"]["replicas"] == 2
    assert op.scaler.running(KEY)
    await op.scaler.stop()


async def test_fixed_replicas_run_no_loop_even_under_the_deployments_scaling() -> None:
    op, cluster = operator_with(
        deployment("ouranos", spec(scaling=SCALING)), agent("research", spec(replicas=2))
    )

    await reconcile_agent(op, NS, "research")

    assert not op.scaler.running(KEY)
    assert applied_deployments(cluster)[-1]["spec"]["replicas"] == 2
    assert cluster.scaled == []
    assert "scaling" not in cluster.statuses[-1][1]


async def test_the_deployments_scaling_sizes_an_agent_without_its_own() -> None:
    s = await scaled(on_deployment=True)

    assert s.op.scaler.running(KEY)
    assert s.notified == [KEY]
    await reconcile_agent(s.op, NS, "research")
    scaling = s.cluster.statuses[-1][1]["scaling"]
    assert scaling["desiredReplicas"] == 1
    assert scaling["reason"].startswith("no turn for 60s (idleSeconds)")
    await s.op.scaler.stop()


async def test_a_deleted_agent_stops_its_loop() -> None:
    s = await scaled()
    task = s.op.scaler.get(KEY).task  # type: ignore[union-attr]
    assert task is not None
    assert not task.done()
    s.op.world.record(names.AGENT_KIND, agent("research", spec(scaling=SCALING)), deleted=True)

    await reconcile_agent(s.op, NS, "research")

    assert not s.op.scaler.running(KEY)
    await asyncio.sleep(0)
    assert task.cancelled()


def test_a_round_comes_every_tenth_of_idle_seconds_and_at_least_every_30_s() -> None:
    def every(idle: int) -> float:
        return ScaleTarget(NS, "research", "uid", 8000, ScalingSpec(idle_seconds=idle)).interval

    assert (every(60), every(300), every(900)) == (6.0, 30.0, 30.0)


def test_a_pods_exposition_gives_its_turns_in_flight_and_its_last_turn() -> None:
    text = (
        '# TYPE pallas_send_message_in_flight gauge\npallas_send_message_in_flight{agent="a"} 3.0\n'
        "# TYPE pallas_last_turn_timestamp_seconds gauge\n"
        'pallas_last_turn_timestamp_seconds{agent="a"} 1.8e+09\n'
    )
    assert parse_reading(text) == PodReading(3, 1.8e9)
    assert parse_reading(text.split("# TYPE pallas_last")[0]) == PodReading(3, None)  # no turn yet
    with pytest.raises(ValueError, match="pallas_send_message_in_flight"):
        parse_reading("# TYPE other gauge\nother 1\n")
    assert metrics_url("fd00::5", 8000) == "http://[fd00::5]:8000/metrics"


async def test_a_second_reconcile_of_an_unchanged_scaled_agent_writes_nothing() -> None:
    s = await scaled({**SCALING, "minReplicas": 2})
    await reconcile_agent(s.op, NS, "research")  # the loop's first decision into the status
    s.cluster.watch(s.op.world)
    writes = s.cluster.writes()

    await reconcile_agent(s.op, NS, "research")

    assert s.cluster.writes() == writes
    await s.op.scaler.stop()


async def test_rounds_that_keep_the_count_ask_for_no_status_write() -> None:
    s = await scaled()
    s.run_pods(1, in_flight=3)
    await s.round()  # 2 pods: a new count, reported
    reported = len(s.notified)

    for in_flight in (4, 3, 4):  # the turns in flight move, the count does not
        s.run_pods(2, in_flight=in_flight // 2)
        assert (await s.round()).replicas == 2

    assert len(s.notified) == reported
    assert "3 turn(s) in flight" in s.op.scaler.decision(KEY).reason  # type: ignore[union-attr]
