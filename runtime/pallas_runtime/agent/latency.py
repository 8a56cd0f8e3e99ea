"""How long the agent's LLM calls and each downstream server take lately, for `get_health`.

A rolling window per part (the LLM, each server or peer): the last `WINDOW_CALLS` calls made
within `WINDOW_SECONDS`. Its mean is what `get_health` compares with `healthCheck.slowLlmSeconds`
and `slowToolSeconds`: a part over its threshold makes the agent `degraded` with a message naming
it and its figure (seed 001's "slow responses"), and the agent is `ok` again once faster calls
bring the mean down or the slow ones age out. Fewer than `MIN_CALLS` recent calls judge nothing.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

WINDOW_CALLS = 20
WINDOW_SECONDS = 600.0
MIN_CALLS = 3
LLM = "LLM"
"""The part name of the agent's model calls (servers and peers go by their names)."""


@dataclass(frozen=True, slots=True)
class Slowness:
    """One part over its threshold."""

    part: str
    mean_seconds: float
    calls: int
    threshold: float

    def describe(self) -> str:
        """`LLM avg 12.3s over 20 calls (over 10s)`."""
        return f"{self.part} avg {self.mean_seconds:.1f}s over {self.calls} calls (over {self.threshold:g}s)"


class Latencies:
    """The recent call durations of each part of the agent."""

    def __init__(self) -> None:
        self._calls: dict[str, deque[tuple[float, float]]] = {}

    def record(self, part: str, seconds: float) -> None:
        """One call of `part` took `seconds`."""
        self._calls.setdefault(part, deque(maxlen=WINDOW_CALLS)).append((time.monotonic(), seconds))

    def mean(self, part: str) -> tuple[float, int] | None:
        """The mean of `part`'s recent calls and their number; None with fewer than MIN_CALLS."""
        calls = self._calls.get(part)
        if not calls:
            return None
        since = time.monotonic() - WINDOW_SECONDS
        recent = [seconds for at, seconds in calls if at >= since]
        if len(recent) < MIN_CALLS:
            return None
        return sum(recent) / len(recent), len(recent)

    def slow(self, llm_threshold: float, tool_threshold: float) -> list[Slowness]:
        """Every part whose recent mean is over its threshold, the LLM first."""
        found = []
        for part in sorted(self._calls, key=lambda p: (p != LLM, p)):
            measured = self.mean(part)
            threshold = llm_threshold if part == LLM else tool_threshold
            if measured is not None and measured[0] > threshold:
                found.append(Slowness(part, measured[0], measured[1], threshold))
        return found
