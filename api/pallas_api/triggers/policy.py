"""What a trigger does when it fires: concurrency, the per-minute bound, and run history.

- `admit`: a trigger's `concurrencyPolicy` (as CronJob's): `Allow` starts beside the runs in
  flight, `Forbid` skips this firing while one runs, `Replace` stops those and starts;
- `RateWindow`: at most `maxRunsPerMinute` starts in any 60 s; the rest are dropped and
  counted, never queued (a flood of events must not become a backlog of LLM calls);
- `prune`: the runs status keeps, newest first: every run still going, then the last
  `succeeded` good ones and `failed` bad ones.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Literal, Protocol, TypeVar, get_args

ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
CONCURRENCY_POLICIES: tuple[ConcurrencyPolicy, ...] = get_args(ConcurrencyPolicy)
Admission = Literal["start", "skip", "replace"]
WINDOW_SECONDS = 60.0


def admit(policy: ConcurrencyPolicy, running: int) -> Admission:
    """Whether a firing starts, is skipped, or replaces the `running` runs in flight."""
    if running == 0 or policy == "Allow":
        return "start"
    return "skip" if policy == "Forbid" else "replace"


class RateWindow:
    """A sliding 60 s window of run starts (monotonic seconds in, no clock read here)."""

    def __init__(self, per_minute: int) -> None:
        if per_minute < 1:
            raise ValueError("per_minute must be at least 1")
        self._limit = per_minute
        self._starts: deque[float] = deque()
        self.dropped = 0
        """Firings refused so far."""

    def take(self, now: float) -> bool:
        """Count a start at `now` if the window has room; else count a drop and say no."""
        while self._starts and now - self._starts[0] >= WINDOW_SECONDS:
            self._starts.popleft()
        if len(self._starts) >= self._limit:
            self.dropped += 1
            return False
        self._starts.append(now)
        return True


class _Run(Protocol):
    @property
    def outcome(self) -> str: ...


R = TypeVar("R", bound=_Run)

SUCCEEDED = "Succeeded"
FAILED_OUTCOMES = frozenset({"Failed"})
RUNNING = "Running"


def prune(runs_newest_first: Sequence[R], *, succeeded: int, failed: int) -> list[R]:
    """The runs to keep: all running, the newest `succeeded` successes and `failed` failures.

    Skipped and dropped firings are not runs (they are counted in status, not listed).
    """
    kept: list[R] = []
    good = bad = 0
    for run in runs_newest_first:
        if run.outcome == RUNNING:
            kept.append(run)
        elif run.outcome == SUCCEEDED:
            if good < succeeded:
                kept.append(run)
            good += 1
        elif run.outcome in FAILED_OUTCOMES:
            if bad < failed:
                kept.append(run)
            bad += 1
    return kept
