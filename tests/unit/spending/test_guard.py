"""A turn's budgets: refused before an LLM call once spent, charged after, carried down the chain."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from pallas_api.config import AgentConfig, parse_config
from pallas_api.health import utc_timestamp
from pallas_api.spending import ModelPrice, reported_spend, window_end, window_start
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.conversations.caller import ANONYMOUS, Caller
from pallas_runtime.conversations.model import StoreUnavailable
from pallas_runtime.messages import Usage
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.spending import guard
from pallas_runtime.spending.chain import (
    BUDGET_META,
    BadChainBudget,
    ChainBudget,
    spend_meta,
)
from pallas_runtime.spending.guard import BudgetExceeded, Budgets, micros_of, tokens_of
from pallas_runtime.spending.ledger import Bucket, MemoryLedger, Spent

ALICE = Caller("sub:alice", "alice")
BOB = Caller("sub:bob", "bob")


def config(**budgets: Any) -> AgentConfig:
    return parse_config(
        {"name": "orch", "model": "m", "provider": {"name": "p", "type": "openai"}, "budgets": budgets}
    )


def budgets() -> Budgets:
    return Budgets(MemoryLedger(), RuntimeMetrics(process_collectors=False))


def tomorrow() -> str:
    return utc_timestamp(window_end("day", window_start("day", datetime.now(UTC))))


async def test_a_spent_caller_budget_refuses_the_next_call_with_spend_limit_and_reset() -> None:
    b, cfg = budgets(), config(perCaller={"window": "day", "tokens": 100})
    turn = await b.open(cfg, ALICE, None)
    await turn.charge(60, 0)
    turn.check()  # 60 of 100: the next call may start
    await turn.charge(60, 0)  # a call that started under the budget finishes
    with pytest.raises(BudgetExceeded) as refused:
        turn.check()
    assert str(refused.value) == (
        f"budget exceeded: caller sub:alice spent 120 tokens of its 100 per day; it resets at {tomorrow()}"
    )
    await turn.settle()
    # The next turn of the same caller is refused before it starts; another caller is not.
    with pytest.raises(BudgetExceeded, match="caller sub:alice spent 120 tokens"):
        await b.open(cfg, ALICE, None)
    (await b.open(cfg, BOB, None)).check()


async def test_the_agent_budget_counts_every_caller_and_cost_too() -> None:
    b, cfg = budgets(), config(agent={"window": "hour", "cost": 0.01})
    price = ModelPrice(input=2, output=10)
    usage = Usage(input=2000, output=500)  # 4000 + 5000 micros
    first = await b.open(cfg, ALICE, None)
    await first.charge(tokens_of(usage), micros_of(price, usage))
    await first.settle()
    turn = await b.open(cfg, BOB, None)
    await turn.charge(0, 1000)
    with pytest.raises(BudgetExceeded, match=r"agent orch spent 0\.01 of its cost limit 0\.01 per hour"):
        turn.check()
    await turn.settle()
    spent = await b.spent(cfg)
    assert spent is not None
    assert (spent[1].tokens, spent[1].micros) == (2500, 10_000)


async def test_tokens_count_input_output_and_cache_and_unpriced_models_cost_nothing() -> None:
    usage = Usage(input=10, output=5, cache_read=3, cache_write=2, reasoning=4)
    assert tokens_of(usage) == 20  # reasoning is part of output
    assert micros_of(None, usage) == 0
    assert micros_of(ModelPrice(input=1, output=1, cached_input=0), usage) == 17  # cache writes at input


async def test_the_chain_budget_only_restricts_and_the_least_of_all_travels_on() -> None:
    b = budgets()
    cfg = config(perCaller={"window": "day", "tokens": 1000})
    # A caller claiming a huge remainder gets no more than the agent's own budget.
    forged = {BUDGET_META: {"rootCaller": "sub:root", "tokens": 10**12, "cost": 10**6}}
    turn = await b.open(cfg, ALICE, forged)
    await turn.charge(999, 0)
    turn.check()
    await turn.charge(1, 0)
    with pytest.raises(BudgetExceeded, match="caller sub:alice spent 1000 tokens of its 1000"):
        turn.check()
    await turn.settle()
    # The charge went to the authenticated caller, never to the root the metadata names.
    with pytest.raises(BudgetExceeded):
        await b.open(cfg, ALICE, None)
    (await b.open(cfg, Caller("sub:root", "root"), None)).check()
    # A small remainder restricts: 50 tokens left, the turn may spend no more.
    small = await b.open(cfg, BOB, {BUDGET_META: {"rootCaller": "sub:root", "tokens": 50}})
    assert small.onward() == ChainBudget("sub:root", 50, None, small.onward().resets_at)
    await small.charge(30, 0)
    assert small.onward().tokens == 20  # min(1000 - 30, 50 - 30)
    await small.charge(20, 0)
    with pytest.raises(BudgetExceeded) as refused:
        small.check()
    assert "the root caller sub:root had 50 tokens left and this turn spent 50" in str(refused.value)
    assert refused.value.budget == "chain"


async def test_nothing_left_on_arrival_is_refused_before_any_call() -> None:
    with pytest.raises(BudgetExceeded, match="had 0 tokens left"):
        await budgets().open(config(), ALICE, {BUDGET_META: {"rootCaller": "sub:a", "tokens": 0}})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("lots", "must be an object"),
        ({"tokens": 5}, "rootCaller must be 1 to 512 characters"),
        ({"rootCaller": "a", "tokens": -1}, "tokens must be a whole number"),
        ({"rootCaller": "a", "tokens": True}, "tokens must be a whole number"),
        ({"rootCaller": "a", "cost": "free"}, "cost must be a number"),
        ({"rootCaller": "a", "resetsAt": "soon"}, "resetsAt must be an RFC 3339 time"),
    ],
)
def test_a_malformed_chain_budget_says_what_is_wrong(value: Any, problem: str) -> None:
    with pytest.raises(BadChainBudget, match=problem):
        ChainBudget.of({BUDGET_META: value})


def test_the_chain_budget_round_trips_and_spend_reads_back() -> None:
    moment = datetime(2026, 11, 29, tzinfo=UTC)
    chain = ChainBudget("sub:alice", 10, 2500, moment)
    assert chain.to_meta() == {
        BUDGET_META: {
            "rootCaller": "sub:alice",
            "tokens": 10,
            "cost": 0.0025,
            "resetsAt": "2026-11-29T00:00:00Z",
        }
    }
    assert ChainBudget.of(chain.to_meta()) == chain
    assert reported_spend(spend_meta(12, 3456)) == (12, 3456)
    assert reported_spend({"pallas.dev/spend": {"tokens": -1}}) is None
    assert reported_spend(None) is None


async def test_warnings_go_once_when_the_share_passes_warn_at() -> None:
    sent: list[str] = []

    async def send(progress: float, total: float | None, message: str) -> None:
        sent.append(message)

    b = budgets()
    cfg = config(perCaller={"window": "day", "tokens": 100}, warnAt=0.5)
    metrics = RuntimeMetrics(process_collectors=False)
    progress = ProgressReporter("orch", send)
    turn = await b.open(cfg, ALICE, None)
    await guard.before_llm_call(turn, progress)
    await guard.after_llm_call(turn, metrics, "orch", "m", None, Usage(input=40, output=20), progress)
    await guard.before_llm_call(turn, progress)
    await guard.after_llm_call(turn, metrics, "orch", "m", None, Usage(input=10), progress)
    assert sent == [
        f"orch budget warning: caller sub:alice has spent 60% of its day budget (resets at {tomorrow()})"
    ]


async def test_peer_spend_counts_for_the_caller_not_the_agent_and_cost_is_a_metric() -> None:
    b = budgets()
    cfg = config(agent={"window": "day", "tokens": 100}, perCaller={"window": "day", "tokens": 100})
    metrics = RuntimeMetrics(process_collectors=False)
    turn = await b.open(cfg, ALICE, None)
    assert guard.onward_meta(turn)[BUDGET_META]["tokens"] == 100
    await guard.peer_answered(turn, spend_meta(70, 0))
    usage = Usage(input=1000, output=10)
    await guard.after_llm_call(
        turn, metrics, "orch", "m", ModelPrice(input=1, output=100), usage, ProgressReporter("orch", None)
    )
    assert (turn.limits[0].spent.tokens, turn.limits[1].spent.tokens) == (1010, 1080)
    assert metrics.llm_cost_total.labels("orch", "m")._value.get() == pytest.approx(0.002)
    assert guard.onward_meta(None) == {}  # outside a turn nothing travels


async def test_callers_are_metric_labels_only_when_the_spec_says_so_and_bounded() -> None:
    b = budgets()
    plain = await b.open(config(perCaller={"window": "day", "tokens": 10**9}), ALICE, None)
    assert plain.caller_label is None
    cfg = config(callerMetrics=True)
    labels = {(await b.open(cfg, Caller(f"sub:u{i}", f"u{i}"), None)).caller_label for i in range(120)}
    assert len(labels) == 101
    assert "other" in labels
    assert "u0" in labels
    anonymous = await budgets().open(cfg, Caller(ANONYMOUS), None)
    assert anonymous.caller_label == ANONYMOUS


class SlowLedger(MemoryLedger):
    """A ledger whose writes wait for `release`, and that another replica has added 500 to."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def add(self, buckets: Sequence[Bucket], tokens: int, micros: int) -> list[Spent]:
        await self.release.wait()
        return await super().add(buckets, tokens + 500, micros)


async def test_a_charge_is_counted_at_once_and_stored_beside_the_turn() -> None:
    ledger = SlowLedger()
    b = Budgets(ledger, RuntimeMetrics(process_collectors=False))
    turn = await b.open(config(perCaller={"window": "day", "tokens": 1000}), ALICE, None)
    await turn.charge(100, 0)  # returns before the ledger has it
    assert turn.limits[0].spent.tokens == 100
    settling = asyncio.create_task(turn.settle())
    await asyncio.sleep(0.01)
    assert not settling.done()  # the turn's end waits for its writes
    ledger.release.set()
    await settling
    assert turn.limits[0].spent.tokens == 600  # and takes in what others spent meanwhile
    await turn.charge(400, 0)
    with pytest.raises(BudgetExceeded):
        turn.check()


class BrokenLedger(MemoryLedger):
    async def add(self, buckets: Sequence[Bucket], tokens: int, micros: int) -> list[Spent]:
        raise StoreUnavailable("database down")


async def test_a_charge_the_store_refuses_is_still_counted_by_the_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = Budgets(BrokenLedger(), RuntimeMetrics(process_collectors=False))
    turn = await b.open(config(perCaller={"window": "day", "tokens": 10}), ALICE, None)
    await turn.charge(10, 0)
    await turn.settle()
    assert "budget spend not stored: database down" in caplog.text
    with pytest.raises(BudgetExceeded):
        turn.check()


async def test_a_turn_that_outlives_its_window_charges_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    b = budgets()
    cfg = config(perCaller={"window": "hour", "tokens": 100})
    turn = await b.open(cfg, ALICE, None)
    await turn.charge(100, 0)
    with pytest.raises(BudgetExceeded):
        turn.check()
    later = window_end("hour", window_start("hour", datetime.now(UTC)))

    class NextHour(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> NextHour:
            return cls.fromtimestamp(later.timestamp() + 1, tz)

    monkeypatch.setattr(guard, "datetime", NextHour)
    await turn.charge(10, 0)
    await turn.settle()
    turn.check()  # the new hour holds only the 10 charged in it
    assert turn.limits[0].spent.tokens == 10
    assert turn.limits[0].bucket.start == later
