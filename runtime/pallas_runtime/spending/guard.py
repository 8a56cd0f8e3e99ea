"""Budgets enforced on a turn: spend reserved before each LLM call, charged after it.

A turn opens its budget once (`Budgets.open`: one read of the ledger for the agent's and the
caller's windows, and the budget the call carried down the chain). The turns of one process
share each window's figures (`_Window`): what it holds as last known and what the calls in
flight have reserved. Before an LLM call the turn reserves the most the call can spend (its
input as estimated, `agent.window`, and the room for its answer: `maxTokens` or the model's
`maxOutputTokens`); a call finding the window's spend and reservations at its limit waits for
the calls in flight to finish, and is refused once the spend itself is at the limit. After the
call the reservation is released and the call's real usage charged; a cancelled call (the
provider was called) is charged its estimated input. So the calls of one process, however many
turns run at once, overrun a budget by at most one call's reservation: the last call admitted
while the window was under its limit. Each charge adds the call's tokens and cost to the ledger
with atomic increments and reads back the totals, so spend of other replicas is seen at the
next check (reservations are the process's own: replicas each add at most one reservation).

The turn's budget travels in the turn (`agent.turn.Turn.budget`) and in what its tool calls hand
their sources (`downstream.source.Onward.budget`): the loop checks and charges it, a peer call
passes on what is left and charges what the peer reports back. A call to a peer holds what it
passes on (`peer_grant`) until it returns: its reported spend is charged and the rest released
(also when it fails or is cancelled). A sibling call of the same turn (the model asked for
several at once) passes on what is left less what the calls in flight hold, and waits while
they hold it all. So a fan-out overruns the root caller's budget by at most what one peer's
last admitted LLM call spends beyond its grant, as one agent's concurrent calls do.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pallas_api.config import AgentConfig
from pallas_api.health import utc_timestamp
from pallas_api.spending import BudgetLimit, ModelPrice, format_cost, reported_spend, window_end, window_start
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.messages import Usage
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.spending.chain import ChainBudget
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


@dataclass(slots=True, weakref_slot=True)
class _Window:
    """One budget window as the turns of this process share it."""

    spent: Spent = field(default_factory=Spent)
    """What the window holds as last known: the ledger's totals and this process's charges."""
    reserved: Spent = field(default_factory=Spent)
    """What the LLM calls in flight have reserved."""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    """Set (and replaced) whenever a reservation is released: calls waiting look again."""

    def release(self, tokens: int, micros: int) -> None:
        self.reserved = Spent(self.reserved.tokens - tokens, self.reserved.micros - micros)
        released, self.released = self.released, asyncio.Event()
        released.set()


class _Windows:
    """The windows of one process, each shared by the turns that use it (and dropped after them)."""

    def __init__(self) -> None:
        self._windows: weakref.WeakValueDictionary[Bucket, _Window] = weakref.WeakValueDictionary()

    def get(self, bucket: Bucket, spent: Spent | None = None) -> _Window:
        """The window of `bucket`, taking in what the ledger says it holds (`spent`)."""
        window = self._windows.get(bucket)
        if window is None:
            self._windows[bucket] = window = _Window()
        if spent is not None:
            window.spent = Spent(
                max(spent.tokens, window.spent.tokens), max(spent.micros, window.spent.micros)
            )
        return window


@dataclass(slots=True)
class _Limit:
    """One budget of a turn: its limit and its window's shared figures."""

    kind: Kind
    subject: str
    limit: BudgetLimit
    bucket: Bucket
    window: _Window
    warned: bool = False

    @property
    def spent(self) -> Spent:
        return self.window.spent

    def full(self) -> bool:
        """Whether the spend and the reservations in flight together reach the limit."""
        limit, spent, held = self.limit, self.window.spent, self.window.reserved
        if held.tokens <= 0 and held.micros <= 0:
            return False  # nothing to wait for: `over` decides
        if limit.tokens is not None and spent.tokens + held.tokens >= limit.tokens:
            return True
        micros = limit.cost_micros
        return micros is not None and spent.micros + held.micros >= micros

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
class Reservation:
    """What one LLM call holds of its turn's windows while it runs."""

    tokens: int
    micros: int
    input_tokens: int
    """The call's estimated input: what a cancelled call is charged."""
    input_micros: int
    limits: tuple[_Limit, ...]
    ended: bool = False
    """Released (and the call charged): a reservation ends once."""


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
    windows: _Windows = field(default_factory=_Windows)
    caller_label: str | None = None
    tokens: int = 0
    """Tokens the turn spent: its own LLM calls and what its peers reported."""
    micros: int = 0
    chain_warned: bool = False
    granted: Spent = field(default_factory=Spent)
    """What the calls to peers in flight hold of the root caller's remainder (`grant`)."""
    _grant_released: asyncio.Event = field(default_factory=asyncio.Event)
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

    @property
    def limited(self) -> bool:
        """Whether anything limits the turn (else nothing is reserved)."""
        return bool(self.limits) or self.chain is not None

    async def reserve(self, tokens: int, micros: int, input_tokens: int, input_micros: int) -> Reservation:
        """Hold the most an LLM call can spend in the turn's windows before it is made.

        Waits while the windows' spend and the reservations of calls in flight reach a limit
        (those calls may spend less than they hold); refuses once the spend itself does.

        Raises:
            BudgetExceeded: a budget of the agent, the caller or the chain is spent.
        """
        while True:
            self._roll()
            self.check()
            full = next((limit for limit in self.limits if limit.full()), None)
            if full is None:
                break
            await full.window.released.wait()
        for limit in self.limits:  # no await since the check: no other call slips in between
            held = limit.window.reserved
            limit.window.reserved = Spent(held.tokens + tokens, held.micros + micros)
        return Reservation(tokens, micros, input_tokens, input_micros, tuple(self.limits))

    def release(self, reservation: Reservation) -> None:
        """Give back what a call held (it is charged what it spent, apart); once only."""
        if reservation.ended:
            return
        reservation.ended = True
        for limit in reservation.limits:
            limit.window.release(reservation.tokens, reservation.micros)

    def _refused(self, kind: str) -> None:
        self.metrics.budget_exceeded_total.labels(self.agent, kind).inc()

    async def charge(self, tokens: int, micros: int, *, own: bool = True) -> None:
        """Add spend to the turn and to its budgets' windows (`count`, from a coroutine)."""
        self.count(tokens, micros, own=own)

    def count(self, tokens: int, micros: int, *, own: bool = True) -> None:
        """Add spend to the turn and to its budgets' windows, at once (the ledger's write runs apart).

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
        self._roll()
        for limit in limits:  # counted at once: the next check must see it
            spent = limit.window.spent
            limit.window.spent = Spent(spent.tokens + tokens, spent.micros + micros)
        # Stored meanwhile: the increment's round trip (3 to 6 ms on SQLite and PostgreSQL) runs
        # beside the turn's next work instead of before it; the turn waits for it at its end.
        write = asyncio.create_task(self._store(limits, [lim.bucket for lim in limits], tokens, micros))
        _WRITES.add(write)
        write.add_done_callback(_WRITES.discard)
        self._writes.append(write)
        self._warn()

    def _roll(self) -> None:
        """Move each budget whose window ended during the turn to the new one."""
        now = datetime.now(UTC)
        for limit in self.limits:
            start = window_start(limit.limit.window, now)
            if start != limit.bucket.start:
                limit.bucket = Bucket(self.identity, limit.subject, limit.limit.window, start)
                limit.window, limit.warned = self.windows.get(limit.bucket), False

    async def _store(self, limits: list[_Limit], buckets: list[Bucket], tokens: int, micros: int) -> None:
        """Add one charge to the ledger; take in the totals it read back (other turns' and replicas')."""
        try:
            totals = await self.ledger.add(buckets, tokens, micros)
        except Exception as exc:  # noqa: BLE001 - the answer was paid for: keep counting locally
            log.warning("budget spend not stored: %s", exc, extra={"agent": self.agent})
            return
        for limit, bucket, total in zip(limits, buckets, totals, strict=True):
            if limit.bucket == bucket:  # the totals of a window that has not ended meanwhile
                mine = limit.window.spent
                limit.window.spent = Spent(max(mine.tokens, total.tokens), max(mine.micros, total.micros))
        self._warn()

    async def settle(self) -> None:
        """Wait until every charge of the turn is stored (at the turn's end)."""
        writes, self._writes = self._writes, []
        if writes:  # `wait`, not `gather`: a turn cancelled again meanwhile must not cancel them
            await asyncio.wait(writes)

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

    async def grant(self) -> ChainBudget:
        """Hold what a call to a peer may spend: what is left less what the calls in flight hold.

        Waits while the peer calls in flight hold all that is left (each returns what its peer
        did not spend); with none in flight the call gets what is left, nothing included (the
        peer then refuses to spend).
        """
        while True:
            self._roll()
            offer = self.onward()
            spent_out = (offer.tokens is not None and offer.tokens <= 0) or (
                offer.micros is not None and offer.micros <= 0
            )
            if not spent_out or (self.granted.tokens <= 0 and self.granted.micros <= 0):
                break
            await self._grant_released.wait()
        held = self.granted
        self.granted = Spent(held.tokens + (offer.tokens or 0), held.micros + (offer.micros or 0))
        return offer

    def ungrant(self, offer: ChainBudget) -> None:
        """Give back what a peer call held (its reported spend is charged apart, before)."""
        held = self.granted
        self.granted = Spent(held.tokens - (offer.tokens or 0), held.micros - (offer.micros or 0))
        released, self._grant_released = self._grant_released, asyncio.Event()
        released.set()

    def onward(self) -> ChainBudget:
        """What the root caller has left for a new call to a peer.

        The least of every budget, less what the peer calls in flight hold (`grant`).
        """
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
        held = self.granted
        return ChainBudget(
            self.root,
            max(min(tokens) - held.tokens, 0) if tokens else None,
            max(min(micros) - held.micros, 0) if micros else None,
            min(resets, default=None),
        )


class Budgets:
    """One agent's budgets over its ledger: opens each turn's."""

    def __init__(self, ledger: Ledger, metrics: RuntimeMetrics) -> None:
        self.ledger = ledger
        self._metrics = metrics
        self._labelled: set[str] = set()
        self._windows = _Windows()

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
                limits.append(_Limit(kind, subject, budget, bucket, self._windows.get(bucket)))
        if limits:
            for limit, spent in zip(limits, await self.ledger.read([x.bucket for x in limits]), strict=True):
                limit.window = self._windows.get(limit.bucket, spent)
        turn = TurnBudget(
            config.name, config.identity, caller, budgets.warn_at, limits, chain, self.ledger, self._metrics,
            self._windows, caller_label=self._caller_label(caller) if budgets.caller_metrics else None,
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


async def before_llm_call(
    turn: TurnBudget | None,
    progress: Notes,
    price: ModelPrice | None = None,
    input_tokens: int = 0,
    answer_tokens: int = 0,
) -> Reservation | None:
    """Reserve what an LLM call can spend in the turn's budgets (None: nothing limits the turn).

    `input_tokens`: the call's input as estimated; `answer_tokens`: the room for its answer.
    Waits while calls in flight hold the rest of a budget; sends the warnings due.

    Raises:
        BudgetExceeded: a budget is spent.
    """
    if turn is None:
        return None
    reservation = None
    if turn.limited:
        most = Usage(input=input_tokens, output=answer_tokens)
        reservation = await turn.reserve(
            tokens_of(most), micros_of(price, most), input_tokens, micros_of(price, Usage(input=input_tokens))
        )
    for note in turn.notes():
        await progress.note(note)
    return reservation


async def after_llm_call(
    turn: TurnBudget | None,
    metrics: RuntimeMetrics,
    agent: str,
    model: str,
    price: ModelPrice | None,
    usage: Usage,
    progress: Notes,
    reservation: Reservation | None = None,
) -> None:
    """Count a call's cost and charge it to the turn's budgets in place of what it reserved."""
    micros = micros_of(price, usage)
    if micros:
        metrics.llm_cost_total.labels(agent, model).inc(micros / 1e6)
    if turn is None:
        return
    if reservation is not None:
        turn.release(reservation)
    turn.count(tokens_of(usage), micros)  # with the release, before any other call looks
    for note in turn.notes():
        await progress.note(note)


def llm_call_ended(turn: TurnBudget | None, reservation: Reservation | None, *, cancelled: bool) -> None:
    """Release what a call that gave no answer reserved; a cancelled one is charged its input.

    A provider that failed charged nothing; a cancelled call was sent and is billed for its
    input at least (the output streamed before the cancel is not known: it is not charged).
    Nothing happens for a call already charged (`after_llm_call`).
    """
    if turn is None or reservation is None or reservation.ended:
        return
    turn.release(reservation)
    if cancelled:
        turn.count(reservation.input_tokens, reservation.input_micros)


@asynccontextmanager
async def llm_call(
    turn: TurnBudget | None,
    progress: Notes,
    price: ModelPrice | None,
    input_tokens: int,
    answer_tokens: int,
) -> AsyncIterator[Reservation | None]:
    """`before_llm_call` around an LLM call whose block ends with `after_llm_call`.

    A block that ends otherwise releases the reservation: charged the input if cancelled.

    Raises:
        BudgetExceeded: a budget is spent (the block does not run).
    """
    reservation = await before_llm_call(turn, progress, price, input_tokens, answer_tokens)
    try:
        yield reservation
    except asyncio.CancelledError:
        llm_call_ended(turn, reservation, cancelled=True)
        raise
    except BaseException:
        llm_call_ended(turn, reservation, cancelled=False)
        raise


async def peer_answered(turn: TurnBudget | None, meta: Mapping[str, Any] | None) -> None:
    """Charge what a peer agent's turn reports it spent to the calling turn's caller."""
    spent = reported_spend(meta)
    if turn is None or spent is None:
        return
    await turn.charge(*spent, own=False)


@asynccontextmanager
async def peer_grant(turn: TurnBudget | None) -> AsyncIterator[dict[str, Any]]:
    """The budget `_meta` of one call to a peer, held from the turn's remainder while it runs.

    Empty (nothing held) outside a turn and for a turn nothing limits, as `onward_meta`. The
    peer's reported spend is charged inside the block (`peer_answered`); leaving it, however,
    releases the grant.
    """
    if turn is None or not turn.limited:
        yield {}
        return
    offer = await turn.grant()
    try:
        yield offer.to_meta()
    finally:
        turn.ungrant(offer)


def onward_meta(turn: TurnBudget | None) -> dict[str, Any]:
    """The budget `_meta` of a call to a peer from a turn with budget `turn`.

    Empty outside a turn (None), and for a turn that nothing limits (no budget of its own, none
    from the chain): then nothing travels and the peer reports no spend back.
    """
    if turn is None or (not turn.limits and turn.chain is None):
        return {}
    return turn.onward().to_meta()
