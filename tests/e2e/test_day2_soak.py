"""Day-2 under live traffic, bounded (issue 26): a spec edit, a key rotation, a rollout and an
operator restart, one after another, while callers hold conversations, lose no turn and fail
no send.

The soak of bench/soak.py (tests/support/soak), shortened to about a minute of traffic: four
callers with OIDC identities of their own, one message a second in all, model calls of one
second, every other caller's turns delegated orchestrator → researcher, conversations in
PostgreSQL. Each event waits until its change took effect (the orchestrator's model sees the new
instruction, both agents' model requests carry the new key, the Deployments rolled out, a new
operator pod) and the cluster settled, then five seconds of traffic run before the next. Every
conversation is read back at the end. The failure message is the soak's table.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.cluster import LocalCluster
from tests.support.e2e import local_node
from tests.support.soak.events import EVENTS
from tests.support.soak.run import Plan, SoakResult, run_soak
from tests.support.soak.script import ORCHESTRATOR
from tests.support.soak.world import soak_world

pytestmark = pytest.mark.timeout(900)

PLAN = Plan(
    clients=4, rate=1.0, llm_latency=1.0, turns=4, settle=5.0, warmup=10.0, event_timeout=150.0, max_sends=600
)
GRACEFUL_EVENTS = ("edit", "rotate", "rollout", "operator")


def problems(result: SoakResult) -> list[str]:
    """Everything issue 26's target for graceful events forbids, one line each."""
    found = []
    for row in result.rows[1:-1]:
        if row.settled_in is None:
            found.append(f"{row.event}: did not settle ({row.note})")
    total = result.total
    if total.failed:
        found.append(f"{total.failed} failed sends: {dict(total.codes)}")
    if total.lost:
        found.append(f"{total.lost} acknowledged turns missing from the history")
    if total.context_lost:
        found.append(f"{total.context_lost} turns whose model was not sent an earlier acknowledged turn")
    if total.leaks:
        found.append(f"{total.leaks} cross-caller leaks")
    if result.history.unverified:
        found.append(f"histories that could not be read: {result.history.unverified}")
    return found


async def test_graceful_day2_changes_under_traffic_lose_no_turn_and_fail_no_send(
    pallas_crds: LocalCluster,
) -> None:
    node = await asyncio.to_thread(local_node)
    async with soak_world(pallas_crds, node, llm_latency=PLAN.llm_latency) as world:
        result = await run_soak(world, PLAN, [EVENTS[name] for name in GRACEFUL_EVENTS])
        if result.history.lost:  # what the agent said meanwhile, while its pod is there to ask
            result.notes.append(await world.kubectl("logs", f"deployment/{ORCHESTRATOR}", "--tail=400"))
    baseline = result.rows[0]
    # The instrument works: the undisturbed traffic flowed, answered and checked.
    assert baseline.sends >= 4, result.table()
    assert baseline.failed == 0, result.table()
    assert [r.event for r in result.rows[1:-1]] == list(GRACEFUL_EVENTS), result.table()
    found = problems(result)
    assert not found, "\n".join(
        ["day-2 events under traffic:", *found, "", result.table(), *result.notes, *result.losses()]
    )
