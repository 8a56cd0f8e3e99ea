"""The soak's figures: every send, lost turn and leak grouped by the event window it fell in (pure).

A window runs from an event's start to the next event's start (the last one to the end of the
traffic); the first window, `baseline`, is the warm-up before any event. A send belongs to the
window in which it *ended* (a turn in flight when an event starts is that event's), a lost turn
to the window in which it was acknowledged, a leak to the window of the send or history read
that showed it.

- `sends` / `failed`: attempts, and those not answered (by code: the agent's error code, or what
  the client saw: `CONNECTION_LOST`, `CONNECT_FAILED`, `CLIENT_TIMEOUT`, …; `PEER_FAILED` when
  the orchestrator answered but its researcher's part failed).
- `resumed`: sends whose session was gone (404), sent again on a new session by the caller, as
  an MCP client must; not failures, but each one is a session the product lost.
- `lost`: acknowledged turns absent from the conversation's history when it was read back.
- `ctx lost`: answered turns whose model (orchestrator or researcher) was not sent an earlier
  acknowledged turn of the conversation.
- `leaks`: another caller's secret in what a model was sent or in a caller's history.
- latency: P50/P99 of answered sends ending in the `settle` seconds *before* the event, and
  *during* it (from its start until it settled).
- `recovery`: from the event's start to the end of its last failed send (0: none failed).
- `settled`: from the event's start until its change showed and the cluster settled.
- `target`: issue 26's, for the event's kind: graceful — nothing failed, lost or leaked and no
  context lost; crash — nothing lost or leaked, only retryable failures, recovery ≤ 30 s.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tests.support.soak.clients import RETRYABLE, Loss, Send

CRASH_RECOVERY_TARGET = 30.0


@dataclass(frozen=True)
class Window:
    name: str
    kind: str
    """`baseline`, `graceful` or `crash`."""
    started: float
    ended: float
    settled: float | None
    """When its change showed and the cluster settled (None: it did not)."""
    note: str = ""


@dataclass(frozen=True)
class Row:
    event: str
    kind: str
    sends: int
    failed: int
    codes: Counter[str]
    non_retryable: int
    resumed: int
    lost: int
    context_lost: int
    leaks: int
    before: tuple[float, float] | None
    during: tuple[float, float] | None
    recovery: float
    settled_in: float | None
    note: str = ""
    examples: dict[str, str] = field(default_factory=dict)
    """A detail of one failure per code, for reading what went wrong."""

    @property
    def meets_target(self) -> bool:
        if self.lost or self.leaks or self.settled_in is None:
            return False
        if self.kind == "crash":
            return self.non_retryable == 0 and self.recovery <= CRASH_RECOVERY_TARGET
        return self.failed == 0 and self.context_lost == 0


def percentiles(values: Sequence[float]) -> tuple[float, float] | None:
    """(P50, P99) by the nearest-rank method, or None without values."""
    if not values:
        return None
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return rank(0.50), rank(0.99)


def rows(
    windows: Sequence[Window],
    sends: Iterable[Send],
    lost: Iterable[Loss],
    history_leaks: Iterable[tuple[str, str, float]],
    settle: float,
) -> list[Row]:
    """One row per window, then `total`."""
    sends, lost, history_leaks = list(sends), list(lost), list(history_leaks)
    out = []
    for window in windows:
        mine = [s for s in sends if window.started <= s.ended < window.ended]
        failed = [s for s in mine if not s.ok]
        answered = [s for s in mine if s.ok]
        until = window.settled if window.settled is not None else window.ended
        before = [s.latency for s in sends if s.ok and window.started - settle <= s.ended < window.started]
        during = [s.latency for s in answered if s.ended <= until]
        leaks = sum(1 for s in answered if s.verdict and s.verdict.leaked)
        leaks += sum(1 for _, _, at in history_leaks if window.started <= at < window.ended)
        codes = Counter(str(s.code) for s in failed)
        out.append(
            Row(
                event=window.name,
                kind=window.kind,
                sends=len(mine),
                failed=len(failed),
                codes=codes,
                non_retryable=sum(n for code, n in codes.items() if code not in RETRYABLE),
                resumed=sum(1 for s in mine if s.resumed),
                lost=sum(1 for loss in lost if window.started <= loss.acked_at < window.ended),
                context_lost=sum(1 for s in answered if s.verdict and s.verdict.context_lost),
                leaks=leaks,
                before=percentiles(before),
                during=percentiles(during),
                recovery=max((s.ended for s in failed), default=window.started) - window.started,
                settled_in=None if window.settled is None else window.settled - window.started,
                note=window.note,
                examples={str(s.code): s.detail for s in reversed(failed)},
            )
        )
    events = [r for r in out if r.kind != "baseline"]
    codes = sum((r.codes for r in out), Counter[str]())
    out.append(
        Row(
            event="total",
            kind="",
            sends=sum(r.sends for r in out),
            failed=sum(r.failed for r in out),
            codes=codes,
            non_retryable=sum(r.non_retryable for r in out),
            resumed=sum(r.resumed for r in out),
            lost=sum(r.lost for r in out),
            context_lost=sum(r.context_lost for r in out),
            leaks=sum(r.leaks for r in out),
            before=None,
            during=percentiles([s.latency for s in sends if s.ok]),
            recovery=max((r.recovery for r in events), default=0.0),
            settled_in=None,
        )
    )
    return out


def _pair(value: tuple[float, float] | None) -> str:
    return "-" if value is None else f"{value[0]:.1f} / {value[1]:.1f}"


def _codes(codes: Counter[str]) -> str:
    return " ".join(f"{code} x{n}" for code, n in codes.most_common()) or "-"


HEADER = (
    "event",
    "kind",
    "sends",
    "failed",
    "failed by code",
    "resumed",
    "lost",
    "ctx lost",
    "leaks",
    "p50/p99 before (s)",
    "p50/p99 during (s)",
    "recovery (s)",
    "settled (s)",
    "target",
)


def cells(row: Row) -> tuple[str, ...]:
    if row.event == "total":
        target = ""
        settled = "-"
    else:
        target = "-" if row.kind == "baseline" else ("met" if row.meets_target else "MISSED")
        settled = (
            "-" if row.kind == "baseline" else ("no" if row.settled_in is None else f"{row.settled_in:.0f}")
        )
    return (
        row.event,
        row.kind,
        str(row.sends),
        str(row.failed),
        _codes(row.codes),
        str(row.resumed),
        str(row.lost),
        str(row.context_lost),
        str(row.leaks),
        _pair(row.before),
        _pair(row.during),
        "-" if row.kind == "baseline" else f"{row.recovery:.0f}",
        settled,
        target,
    )


def table(report: Sequence[Row]) -> str:
    """The rows as a Markdown table, then each event's notes and, per failure code, what one
    such failure said."""
    lines = [HEADER, *(cells(r) for r in report)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def render(line: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) + " |"

    text = [render(HEADER), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    text += [render(cells(r)) for r in report]
    notes = [f"- {r.event}: {r.note}" for r in report if r.note]
    notes += [
        f"- {r.event} {code}: {detail}"
        for r in report
        if r.event != "total"
        for code, detail in sorted(r.examples.items())
    ]
    return "\n".join(text + (["", *notes] if notes else []))
