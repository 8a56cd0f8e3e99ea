"""Budgets enforced on a turn: checked before each LLM call, charged after it.

A turn opens its budget once (`Budgets.open`: one read of the ledger for the agent's and the
caller's windows, and the budget the call carried down the chain). Checking before an LLM call
then compares numbers in memory; each charge adds the call's tokens and cost to the ledger with
atomic increments and reads back the totals, so spend of other replicas and of the caller's
other turns is seen at the next check. A call that starts under a budget finishes: a budget can
be overrun by the calls that were running when it ran out, never by a call started after.

The turn's budget travels in the turn (`agent.turn.Turn.budget`) and in what its tool calls hand
their sources (`downstream.source.Onward.budget`): the loop checks and charges it, a peer call
passes on what is left and charges what the peer reports back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pallas_api.config import AgentConfig
from pallas_api.health import utc_timestamp
from pallas_api.spending import BudgetLimit, ModelPrice, format_cost, window_end, window_start
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.messages import Usage
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.spending.chain import ChainBudget, reported_spend
from pallas_runtime.spending.ledger import AGENT_SUBJECT, Bucket, Ledger, Spent

log = logging.getLogger("pallas.budgets")

Kind = Literal["agent", "caller"]
CALLER_LABELS = 100
"""Callers a process labels by name in `pallas_llm_cost_by_caller_total`; the rest are `other`."""


class Notes(Protocol):
    """Where a turn's warnings go: its progress notifications (`agent.progress.ProgressReporter`)."""

    async def note(self, message: str) -> None:
        """Send one warning."""
        ...


AgentSpend = tuple[BudgetLimit, Spent, datetime]
"""The agent budget, what its current window holds, and when the window ends."""

_WRITES: set[asyncio.Task[None]] = set()
"""Charges being stored (held here so that none is collected before it is done)."""


class BudgetExceeded(Exception):
    """A budget is spent for its window; the message says whose, how much, the limit, the reset."""

    def __init__(self, message: str, budget: str) -> None:
        super().__init__(message)
        self.budget = budget


def tokens_of(usage: Usage) -> int:
    """The tokens a budget counts: input, output, cache reads, hits and writes (reasoning is output)."""
    return usage.input + usage.output + usage.cache_read + usage.cache_hit + usage.cache_write


def micros_of(price: ModelPrice | None, usage: Usage) -> int:
    """What a call cost in millionths of the currency (0 for a model without a price)."""
    if price is None:
        return 0
    return price.micros(usage.input + usage.cache_write, usage.output, usage.cache_read + usage.cache_hit)


@dataclass(slots=True)
class _Limit:
    """One budget of a turn: its limit and what its window holds as last read."""

    kind: Kind
    subject: str
    limit: BudgetLimit
    bucket: Bucket
    spent: Spent
    warned: bool = False

    def whose(self, agent: str) -> str:
        return f"agent {agent}" if self.kind == "agent" else f"caller {self.subject}"

    def over(self) -> str | None:
        """Why the budget is spent (None: it is not)."""
        limit, spent = self.limit, self.spent
        if limit.tokens is not None and spent.tokens >= limit.tokens:
            return f"spent {spent.tokens} tokens of its {limit.tokens} per {limit.window}"
        micros = limit.cost_micros
        if micros is not None and spent.micros >= micros:
            cost, most = format_cost(spent.micros), format_cost(micros)
            return f"spent {cost} of its cost limit {most} per {limit.window}"
        return None

    def share(self) -> float:
        """The largest share of the limits spent."""
        shares = []
        if self.limit.tokens is not None:
            shares.append(self.spent.tokens / self.limit.tokens)
        if self.limit.cost_micros:
            shares.append(self.spent.micros / self.limit.cost_micros)
        return max(shares, default=0.0)

    @property
    def resets_at(self) -> datetime:
        return window_end(self.limit.window, self.bucket.start)


@dataclass(slots=True)
class TurnBudget:
    """One turn's budgets, what the chain allows, and what the turn spent."""

    agent: str
    identity: str
    """The agent's identity (how the ledger keys its buckets)."""
    caller: Caller
    warn_at: float
    limits: list[_Limit]
    chain: ChainBudget | None
    ledger: Ledger
    metrics: RuntimeMetrics
    caller_label: str | None = None
    tokens: int = 0
    """Tokens the turn spent: its own LLM calls and what its peers reported."""
    micros: int = 0
    chain_warned: bool = False
    _notes: list[str] = field(default_factory=list)
    _writes: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def root(self) -> str:
        """Whose budget the turn spends: the root caller the chain names, else this turn's caller."""
        return self.chain.root if self.chain is not None else self.caller.owner

    def check(self) -> None:
        """Refuse the next LLM call when a budget is spent (in memory: no I/O).

        Raises:
            BudgetExceeded: a budget of the agent, the caller or the chain is spent.
        """
        for limit in self.limits:
            why = limit.over()
            if why is not None:
                self._refused(limit.kind)
                raise BudgetExceeded(
                    f"budget exceeded: {limit.whose(self.agent)} {why}; it resets at "
                    f"{utc_timestamp(limit.resets_at)}",
                    limit.kind,
                )
        chain = self.chain
        if chain is None:
            return
        why = None
        if chain.tokens is not None and self.tokens >= chain.tokens:
            why = f"had {chain.tokens} tokens left and this turn spent {self.tokens}"
        elif chain.micros is not None and self.micros >= chain.micros:
            why = f"had {format_cost(chain.micros)} left and this turn spent {format_cost(self.micros)}"
        if why is not None:
            self._refused("chain")
            resets = f"; it resets at {utc_timestamp(chain.resets_at)}" if chain.resets_at else ""
            raise BudgetExceeded(
                f"budget exceeded: the root caller {chain.root} {why} (the budget its calling agent "
                f"passed on){resets}",
                "chain",
            )

    def _refused(self, kind: str) -> None:
        self.metrics.budget_exceeded_total.labels(self.agent, kind).inc()

    async def charge(self, tokens: int, micros: int, *, own: bool = True) -> None:
        """Add spend to the turn and to its budgets' windows.

        `own`: the agent's own LLM call (counted in the agent's budget and its caller's);
        otherwise a peer's reported spend (counted in the caller's only: the agent budget is
        for the agent's own calls, the peer counts its own).
        """
        self.tokens += tokens
        self.micros += micros
        if micros and self.caller_label is not None:
            self.metrics.llm_cost_by_caller_total.labels(self.agent, self.caller_label).inc(micros / 1e6)
        limits = [limit for limit in self.limits if own or limit.kind == "caller"]
        if not limits or not (tokens or micros):
            self._warn()
            return
        now = datetime.now(UTC)
        for limit in limits:
            start = window_start(limit.limit.window, now)
            if start != limit.bucket.start:  # a new window began during the turn
                limit.bucket = Bucket(self.identity, limit.subject, limit.limit.window, start)
                limit.spent, limit.warned = Spent(), False
        for limit in limits:  # counted at once: the next check must see it
            limit.spent = Spent(limit.spent.tokens + tokens, limit.spent.micros + micros)
        # Stored meanwhile: the increment's round trip (3 to 6 ms on SQLite and PostgreSQL) runs
        # beside the turn's next work instead of before it; the turn waits for it at its end.
        write = asyncio.create_task(self._store(limits, [lim.bucket for lim in limits], tokens, micros))
        _WRITES.add(write)
        write.add_done_callback(_WRITES.discard)
        self._writes.append(write)
        self._warn()

    async def _store(self, limits: list[_Limit], buckets: list[Bucket], tokens: int, micros: int) -> None:
        """Add one charge to the ledger; take in the totals it read back (other turns' and replicas')."""
        try:
            totals = await self.ledger.add(buckets, tokens, micros)
        except Exception as exc:  # noqa: BLE001 - the answer was paid for: keep counting locally
            log.warning("budget spend not stored: %s", exc, extra={"agent": self.agent})
            return
        for limit, bucket, total in zip(limits, buckets, totals, strict=True):
            if limit.bucket == bucket:  # the totals of a window that has not ended meanwhile
                mine = limit.spent
                limit.spent = Spent(max(mine.tokens, total.tokens), max(mine.micros, total.micros))
        self._warn()

    async def settle(self) -> None:
        """Wait until every charge of the turn is stored (at the turn's end)."""
        writes, self._writes = self._writes, []
        if writes:
            await asyncio.gather(*writes)

    def _warn(self) -> None:
        for limit in self.limits:
            share = limit.share()
            if not limit.warned and self.warn_at <= share < 1:
                limit.warned = True
                self._notes.append(
                    f"budget warning: {limit.whose(self.agent)} has spent {share:.0%} of its "
                    f"{limit.limit.window} budget (resets at {utc_timestamp(limit.resets_at)})"
                )
        chain = self.chain
        if chain is not None and not self.chain_warned:
            shares = []
            if chain.tokens:
                shares.append(self.tokens / chain.tokens)
            if chain.micros:
                shares.append(self.micros / chain.micros)
            if shares and max(shares) >= self.warn_at:
                self.chain_warned = True
                self._notes.append(
                    f"budget warning: this turn has spent {max(shares):.0%} of what the root caller "
                    f"{chain.root} had left"
                )

    def reported(self) -> tuple[int, int] | None:
        """What the turn spent, for a calling agent: only when the call came with a chain budget."""
        return (self.tokens, self.micros) if self.chain is not None else None

    def notes(self) -> list[str]:
        """Warnings not yet sent."""
        notes, self._notes = self._notes, []
        return notes

    def onward(self) -> ChainBudget:
        """What the root caller has left, for a call to a peer: the least of every budget."""
        tokens: list[int] = []
        micros: list[int] = []
        resets: list[datetime] = []
        for limit in self.limits:
            if limit.kind != "caller":
                continue  # the agent's own budget is not the root caller's
            if limit.limit.tokens is not None:
                tokens.append(max(limit.limit.tokens - limit.spent.tokens, 0))
            if limit.limit.cost_micros is not None:
                micros.append(max(limit.limit.cost_micros - limit.spent.micros, 0))
            resets.append(limit.resets_at)
        chain = self.chain
        if chain is not None:
            if chain.tokens is not None:
                tokens.append(max(chain.tokens - self.tokens, 0))
            if chain.micros is not None:
                micros.append(max(chain.micros - self.micros, 0))
            if chain.resets_at is not None:
                resets.append(chain.resets_at)
        return ChainBudget(
            self.root, min(tokens, default=None), min(micros, default=None), min(resets, default=None)
        )


class Budgets:
    """One agent's budgets over its ledger: opens each turn's."""

    def __init__(self, ledger: Ledger, metrics: RuntimeMetrics) -> None:
        self.ledger = ledger
        self._metrics = metrics
        self._labelled: set[str] = set()

    def _caller_label(self, caller: Caller) -> str:
        name = caller.subject or caller.owner
        if name in self._labelled or len(self._labelled) < CALLER_LABELS:
            self._labelled.add(name)
            return name
        return "other"

    async def open(self, config: AgentConfig, caller: Caller, meta: Mapping[str, Any] | None) -> TurnBudget:
        """The budget of a turn `caller` asks for, with what its request carried down the chain.

        Raises:
            BadChainBudget: the request's `_meta` budget is malformed.
            BudgetExceeded: a budget is already spent.
            StoreUnavailable: the store could not be read.
        """
        chain = ChainBudget.of(meta)
        budgets = config.budgets
        now = datetime.now(UTC)
        limits: list[_Limit] = []
        wanted: tuple[tuple[Kind, str, BudgetLimit | None], ...] = (
            ("agent", AGENT_SUBJECT, budgets.agent),
            ("caller", caller.owner, budgets.per_caller),
        )
        for kind, subject, budget in wanted:
            if budget is not None:
                bucket = Bucket(config.identity, subject, budget.window, window_start(budget.window, now))
                limits.append(_Limit(kind, subject, budget, bucket, Spent()))
        if limits:
            for limit, spent in zip(limits, await self.ledger.read([x.bucket for x in limits]), strict=True):
                limit.spent = spent
        turn = TurnBudget(
            config.name, config.identity, caller, budgets.warn_at, limits, chain, self.ledger, self._metrics,
            caller_label=self._caller_label(caller) if budgets.caller_metrics else None,
        )  # fmt: skip
        turn.check()
        turn._warn()
        return turn

    async def spent(self, config: AgentConfig) -> AgentSpend | None:
        """The agent-wide budget, what its window holds and when it resets (None: no such budget)."""
        limit = config.budgets.agent
        if limit is None:
            return None
        start = window_start(limit.window, datetime.now(UTC))
        (spent,) = await self.ledger.read([Bucket(config.identity, AGENT_SUBJECT, limit.window, start)])
        return limit, spent, window_end(limit.window, start)


async def before_llm_call(turn: TurnBudget | None, progress: Notes) -> None:
    """Refuse an LLM call beyond the turn's budgets (None: a turn without any); send the warnings due.

    Raises:
        BudgetExceeded: a budget is spent.
    """
    if turn is None:
        return
    turn.check()
    for note in turn.notes():
        await progress.note(note)


async def after_llm_call(
    turn: TurnBudget | None,
    metrics: RuntimeMetrics,
    agent: str,
    model: str,
    price: ModelPrice | None,
    usage: Usage,
    progress: Notes,
) -> None:
    """Count a call's cost and charge it to the turn's budgets."""
    micros = micros_of(price, usage)
    if micros:
        metrics.llm_cost_total.labels(agent, model).inc(micros / 1e6)
    if turn is None:
        return
    await turn.charge(tokens_of(usage), micros)
    for note in turn.notes():
        await progress.note(note)


async def peer_answered(turn: TurnBudget | None, meta: Mapping[str, Any] | None) -> None:
    """Charge what a peer agent's turn reports it spent to the calling turn's caller."""
    spent = reported_spend(meta)
    if turn is None or spent is None:
        return
    await turn.charge(*spent, own=False)


def onward_meta(turn: TurnBudget | None) -> dict[str, Any]:
    """The budget `_meta` of a call to a peer from a turn with budget `turn`.

    Empty outside a turn (None), and for a turn that nothing limits (no budget of its own, none
    from the chain): then nothing travels and the peer reports no spend back.
    """
    if turn is None or (not turn.limits and turn.chain is None):
        return {}
    return turn.onward().to_meta()
