"""Reservations: what LLM calls in flight hold of a budget, so concurrent turns cannot overrun it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pallas_api.config import AgentConfig, parse_config
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.messages import Usage
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.spending import guard
from pallas_runtime.spending.guard import BudgetExceeded, Budgets
from pallas_runtime.spending.ledger import MemoryLedger

ALICE = Caller("sub:alice", "alice")
QUIET = ProgressReporter("orch", None)
METRICS = RuntimeMetrics(process_collectors=False)


def config(**budgets: Any) -> AgentConfig:
    return parse_config(
        {"name": "orch", "model": "m", "provider": {"name": "p", "type": "openai"}, "budgets": budgets}
    )


async def test_a_call_waits_while_calls_in_flight_hold_the_rest_and_is_refused_once_spent() -> None:
    b, cfg = Budgets(MemoryLedger(), METRICS), config(agent={"window": "day", "tokens": 100})
    first, second = await b.open(cfg, ALICE, None), await b.open(cfg, ALICE, None)
    held = await guard.before_llm_call(first, QUIET, None, 50, 60)  # may spend 110: holds it all
    waiting = asyncio.create_task(guard.before_llm_call(second, QUIET, None, 50, 60))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the first call might spend the whole budget
    await guard.after_llm_call(first, METRICS, "orch", "m", None, Usage(input=50, output=70), QUIET, held)
    with pytest.raises(BudgetExceeded):  # it did: the second is refused, not sent
        await waiting
    await first.settle()


async def test_a_call_that_spent_less_than_it_held_lets_the_next_one_go() -> None:
    b, cfg = Budgets(MemoryLedger(), METRICS), config(perCaller={"window": "day", "tokens": 100})
    first, second = await b.open(cfg, ALICE, None), await b.open(cfg, ALICE, None)
    held = await guard.before_llm_call(first, QUIET, None, 10, 100)
    waiting = asyncio.create_task(guard.before_llm_call(second, QUIET, None, 10, 100))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await guard.after_llm_call(first, METRICS, "orch", "m", None, Usage(input=10, output=5), QUIET, held)
    assert await waiting is not None
    assert second.limits[0].window.reserved.tokens == 110
    assert second.limits[0].spent.tokens == 15  # the turns of a process share the window's spend


async def test_a_cancelled_call_is_charged_its_input_and_a_failed_one_nothing() -> None:
    b, cfg = Budgets(MemoryLedger(), METRICS), config(agent={"window": "day", "tokens": 1000})
    turn = await b.open(cfg, ALICE, None)
    failed = await guard.before_llm_call(turn, QUIET, None, 30, 100)
    guard.llm_call_ended(turn, failed, cancelled=False)
    assert (turn.limits[0].spent.tokens, turn.limits[0].window.reserved.tokens) == (0, 0)
    cancelled = await guard.before_llm_call(turn, QUIET, None, 30, 100)
    guard.llm_call_ended(turn, cancelled, cancelled=True)
    assert (turn.limits[0].spent.tokens, turn.limits[0].window.reserved.tokens) == (30, 0)
    await turn.settle()
    assert (await b.ledger.read([turn.limits[0].bucket]))[0].tokens == 30


async def test_nothing_is_reserved_for_a_turn_nothing_limits() -> None:
    b = Budgets(MemoryLedger(), METRICS)
    turn = await b.open(config(), ALICE, None)
    assert await guard.before_llm_call(turn, QUIET, None, 30, 100) is None


async def test_a_peer_call_holds_what_it_passes_on_and_a_sibling_waits_for_what_is_left() -> None:
    b, cfg = Budgets(MemoryLedger(), METRICS), config(perCaller={"window": "day", "tokens": 100})
    turn = await b.open(cfg, ALICE, None)
    await turn.charge(15, 0)  # the turn's own LLM call
    async with guard.peer_grant(turn) as first:
        assert first["pallas.dev/budget"]["tokens"] == 85
        assert turn.onward().tokens == 0  # nothing left to pass on beside it
        sibling = asyncio.create_task(turn.grant())
        await asyncio.sleep(0.01)
        assert not sibling.done()  # the first peer may spend all that is left
        await guard.peer_answered(turn, {"pallas.dev/spend": {"tokens": 30, "cost": 0}})
    second = await sibling  # charged 30, released the rest: 55 left
    assert second.tokens == 55
    assert turn.granted.tokens == 55
    turn.ungrant(second)
    assert turn.granted.tokens == 0


async def test_a_failed_or_cancelled_peer_call_gives_back_what_it_held() -> None:
    b, cfg = Budgets(MemoryLedger(), METRICS), config(perCaller={"window": "day", "tokens": 100})
    turn = await b.open(cfg, ALICE, None)
    with pytest.raises(RuntimeError):
        async with guard.peer_grant(turn):
            raise RuntimeError("the peer could not be reached")
    assert turn.granted.tokens == 0
    entered = asyncio.Event()

    async def call() -> None:
        async with guard.peer_grant(turn):
            entered.set()
            await asyncio.Event().wait()

    running = asyncio.create_task(call())
    await entered.wait()
    assert turn.granted.tokens == 100
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert turn.granted.tokens == 0
    assert turn.onward().tokens == 100


async def test_nothing_is_held_for_a_peer_call_of_a_turn_nothing_limits() -> None:
    turn = await Budgets(MemoryLedger(), METRICS).open(config(), ALICE, None)
    async with guard.peer_grant(turn) as meta:
        assert meta == {}
    async with guard.peer_grant(None) as meta:
        assert meta == {}
