"""One soak: callers talking at a steady rate while the events happen one after another.

    result = await run_soak(world, Plan(clients=8, rate=1.0, llm_latency=2.0), [EVENTS["edit"], ...])
    print(result.table())

The traffic starts, runs `warmup` seconds undisturbed (the baseline), then each event acts and
waits until it took effect and the cluster settled, the traffic runs `settle` seconds more, and
the conversations touched meanwhile are read back. After the last event the traffic stops and
every conversation is read back once more. Bounded: at most `max_sends` sends, each event at
most `event_timeout` seconds (one that runs out is noted in its row, and the soak goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lightkube import ApiError

from tests.support.soak.clients import Budget, Caller, Conversation, HistoryCheck, Loss, Send
from tests.support.soak.events import Event
from tests.support.soak.report import Row, Window, rows, table
from tests.support.soak.script import secret_for
from tests.support.soak.world import NotSettled, SoakWorld


@dataclass(frozen=True)
class Plan:
    clients: int = 8
    rate: float = 1.0
    """Messages per second, all callers together (each sends one at a time)."""
    llm_latency: float = 2.0
    """Seconds the fake LLM takes per model call (a delegated turn makes three)."""
    turns: int = 4
    """Messages per conversation; then the caller starts a new one."""
    settle: float = 20.0
    """Seconds of undisturbed traffic after each event settled."""
    warmup: float = 20.0
    """Seconds of undisturbed traffic before the first event (the baseline)."""
    event_timeout: float = 240.0
    max_sends: int = 5000

    @property
    def send_timeout(self) -> float:
        """How long a caller waits for an answer: a delegated turn's three model calls and room."""
        return 30.0 + 4 * self.llm_latency

    def check(self) -> None:
        """Raises ValueError naming the setting that makes no sense."""
        for name in ("clients", "rate", "turns", "max_sends"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive (got {getattr(self, name)})")
        for name in ("llm_latency", "settle", "warmup", "event_timeout"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative (got {getattr(self, name)})")


@dataclass
class SoakResult:
    plan: Plan
    windows: list[Window]
    sends: list[Send]
    history: HistoryCheck
    rows: list[Row]
    sessions_opened: int
    budget_exhausted: bool
    elapsed: float
    notes: list[str] = field(default_factory=list)
    still_lost: list[Loss] = field(default_factory=list)
    """Acknowledged turns missing from the final read-back of every conversation: lost for good
    (a turn missing from one earlier read but there at the end was a read that came too soon)."""

    def table(self) -> str:
        return table(self.rows)

    def losses(self) -> list[str]:
        """Each turn found missing, with the sends of its conversation (for a failure's message)."""
        origin = self.windows[0].started if self.windows else 0.0
        final = {(loss.caller, loss.conversation, loss.turn) for loss in self.still_lost}
        lines = []
        for loss in self.history.lost:
            end = (
                "still missing at the end"
                if (loss.caller, loss.conversation, loss.turn) in final
                else ("there at the end")
            )
            lines.append(
                f"lost: {loss.caller} {loss.conversation} turn {loss.turn}, acknowledged at "
                f"{loss.acked_at - origin:.1f}s, {end}; its conversation's sends:"
            )
            lines += [
                f"  turn {s.turn}: {s.started - origin:.1f}s to {s.ended - origin:.1f}s "
                f"{s.code or 'answered'}{' (resumed)' if s.resumed else ''} {s.detail[:120]}"
                for s in self.sends
                if (s.caller, s.conversation) == (loss.caller, loss.conversation)
            ]
        return lines

    def raw(self) -> dict[str, Any]:
        """Everything measured, times in seconds from the traffic's start (for `--json`)."""
        origin = self.windows[0].started if self.windows else 0.0

        def shifted(record: Any, *names: str) -> dict[str, Any]:
            out = dataclasses.asdict(record)
            for name in names:
                if out.get(name) is not None:
                    out[name] = round(out[name] - origin, 3)
            return out

        return {
            "plan": dataclasses.asdict(self.plan),
            "windows": [shifted(w, "started", "ended", "settled") for w in self.windows],
            "sends": [shifted(s, "started", "ended") for s in self.sends],
            "lost": [shifted(loss, "acked_at") for loss in self.history.lost],
            "history_leaks": [
                {"caller": who, "secret_of": owner, "at": round(at - origin, 3)}
                for who, owner, at in self.history.leaks
            ],
            "unverified": self.history.unverified,
            "notes": self.notes,
        }

    @property
    def total(self) -> Row:
        return self.rows[-1]


class _Checker:
    """Reads histories back, reporting each lost turn and each leak once."""

    def __init__(self, callers: Sequence[Caller]) -> None:
        self.callers = callers
        self.found = HistoryCheck()
        self._lost: set[tuple[str, str, int]] = set()
        self._leaks: set[tuple[str, str]] = set()
        self.last = time.monotonic()

    async def check(self, *, everything: bool = False) -> list[Loss]:
        """Read back what was touched since the last check (or everything); this pass's losses."""
        since, self.last = self.last, time.monotonic()
        this_pass: list[Loss] = []
        for caller in self.callers:
            touched: list[Conversation] = [
                c for c in caller.conversations if everything or c.touched >= since - 1.0
            ]
            found = await caller.check_histories(touched)
            this_pass += found.lost
            for loss in found.lost:
                if (loss.caller, loss.conversation, loss.turn) not in self._lost:
                    self._lost.add((loss.caller, loss.conversation, loss.turn))
                    self.found.lost.append(loss)
            for who, owner, at in found.leaks:
                if (who, owner) not in self._leaks:
                    self._leaks.add((who, owner))
                    self.found.leaks.append((who, owner, at))
            self.found.unverified += found.unverified
        return this_pass


def _say(message: str) -> None:
    print(f"soak: {message}", file=sys.stderr, flush=True)


async def run_soak(
    world: SoakWorld, plan: Plan, events: Sequence[Event], progress: Callable[[str], None] = _say
) -> SoakResult:
    plan.check()
    for event in events:
        if event.prepare is not None:
            progress(f"preparing {event.name}")
            await event.prepare(world)
    sends: list[Send] = []
    run_id = secrets.token_hex(2)
    callers = [
        Caller(
            name,
            world.agent_url(),
            partial(world.token, name),
            run_id=run_id,
            delegate=i % 2 == 0,
            turns=plan.turns,
            timeout=plan.send_timeout,
            record=sends.append,
            secret=secret_for(name),
        )
        for i, name in enumerate(f"c{i:02d}" for i in range(plan.clients))
    ]
    checker = _Checker(callers)
    stop = asyncio.Event()
    budget = Budget(plan.max_sends)
    period = plan.clients / plan.rate
    started = time.monotonic()
    tasks = [
        asyncio.create_task(c.run(period, i * period / plan.clients, stop, budget))
        for i, c in enumerate(callers)
    ]
    drain = asyncio.create_task(_drain_sightings(world, stop))
    marks: list[tuple[str, str, float, float | None, str]] = []
    notes: list[str] = []
    try:
        progress(
            f"{plan.clients} callers, {plan.rate:g} messages/s, model calls {plan.llm_latency:g}s: baseline"
        )
        await asyncio.sleep(plan.warmup)
        marks.append(("baseline", "baseline", started, started, ""))
        for event in events:
            if budget.exhausted:
                notes.append(f"the send budget ({plan.max_sends}) ran out before {event.name}")
                break
            begun = time.monotonic()
            progress(f"{event.name}: {event.what}")
            settled, note = await _act(world, event, plan)
            progress(f"{event.name}: " + (f"settled in {settled - begun:.1f}s" if settled else note))
            marks.append((event.name, event.kind, begun, settled, note))
            await asyncio.sleep(plan.settle)
            await checker.check()
    finally:
        stop.set()
        await asyncio.gather(*tasks, drain, return_exceptions=True)
    ended = time.monotonic()
    progress("reading every conversation back")
    still_lost = await checker.check(everything=True)
    windows = [
        Window(name, kind, begun, marks[i + 1][2] if i + 1 < len(marks) else ended + 3600, settled, note)
        for i, (name, kind, begun, settled, note) in enumerate(marks)
    ]
    found = checker.found
    if found.unverified:
        notes.append(
            f"{len(found.unverified)} histories could not be read: {', '.join(found.unverified[:5])}"
        )
    return SoakResult(
        still_lost=still_lost,
        plan=plan,
        windows=windows,
        sends=sends,
        history=found,
        rows=rows(windows, sends, found.lost, found.leaks, plan.settle),
        sessions_opened=sum(c.sessions_opened for c in callers),
        budget_exhausted=budget.exhausted,
        elapsed=ended - started,
        notes=notes,
    )


async def _act(world: SoakWorld, event: Event, plan: Plan) -> tuple[float | None, str]:
    """Run the event; (when it settled, '') or (None, what went wrong) — then the soak goes on
    once the cluster settled, or after the timeout."""
    try:
        await event.act(world, plan.event_timeout)
        return time.monotonic(), ""
    except (NotSettled, RuntimeError, ApiError, TimeoutError) as exc:
        note = f"{type(exc).__name__}: {exc}"[:400]
    with contextlib.suppress(NotSettled, ApiError):
        await world.until_settled(plan.event_timeout)
    return None, note


async def _drain_sightings(world: SoakWorld, stop: asyncio.Event) -> None:
    while not stop.is_set():
        world.sightings.refresh()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
