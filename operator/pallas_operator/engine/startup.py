"""Whether the operator can act yet: kopf's initial indexing finished and handlers run.

kopf calls an object's handlers only once every object of every indexed kind has been indexed
(its start-up barrier); until then nothing is reconciled. kopf's own ready flag is raised before
that, when its start-up activities end, so it cannot answer readiness. This tracker can:

- every index function reports the objects it indexed, every event handler the objects it
  handled; the first handled event means the barrier is down (handlers run only after it);
- when nothing exists to index, no handler ever runs: the watcher lists each watched kind with
  the watches' own selectors (one item per request) and calls an empty world ready;
- while neither has happened, it logs how far indexing got every `stall_after` seconds, so a
  stuck start-up is visible in the log and in the metrics, never behind a green /readyz.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from pallas_operator.metrics import OperatorMetrics

log = logging.getLogger(__name__)
CHECK_EVERY = 2.0
"""Seconds between looks for an empty world while not ready."""

Emptiness = Callable[[], Awaitable[bool]]
"""Whether every watched kind is empty (with the watches' selectors) in every watched namespace."""


class StartupTracker:
    """Counts indexed and handled objects by kind and decides readiness."""

    def __init__(
        self,
        metrics: OperatorMetrics,
        ready: threading.Event,
        stall_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._stall_after = stall_after
        self._clock = clock
        self._sleep = sleep
        self.indexed_by_kind: Counter[str] = Counter()
        self.handled_by_kind: Counter[str] = Counter()

    @property
    def ready(self) -> bool:
        """Whether initial indexing finished and handlers run."""
        return self._ready.is_set()

    def indexed(self, kind: str) -> None:
        """An index function ran for an object of `kind`."""
        self.indexed_by_kind[kind] += 1
        self._metrics.watch_events.labels(kind=kind, stage="indexed").inc()

    def handled(self, kind: str) -> None:
        """An event handler ran for an object of `kind`: kopf's start-up barrier is down."""
        self.handled_by_kind[kind] += 1
        self._metrics.watch_events.labels(kind=kind, stage="handled").inc()
        self._become_ready("handlers run")

    def _become_ready(self, why: str) -> None:
        if not self._ready.is_set():
            self._ready.set()
            self._metrics.ready.set(1)
            log.info(
                "ready (%s): %d objects indexed at start-up",
                why,
                sum(self.indexed_by_kind.values()),
            )

    async def watch(self, empty: Emptiness) -> None:
        """Until ready: call an empty world ready, and log a stalled start-up now and then."""
        started = self._clock()
        next_report = started + self._stall_after
        while not self._ready.is_set():
            if not self.indexed_by_kind:
                try:
                    if await empty():
                        self._become_ready("nothing to index")
                        return
                except Exception as exc:  # noqa: BLE001 - the API server may not answer yet; look again
                    log.warning("could not list the watched kinds yet: %s", exc)
            if self._clock() >= next_report:
                next_report += self._stall_after
                counts = ", ".join(f"{k} {n}" for k, n in sorted(self.indexed_by_kind.items())) or "none"
                log.warning(
                    "initial indexing has not finished after %.0fs; nothing is reconciled until it "
                    "does (objects indexed so far: %s)",
                    self._clock() - started,
                    counts,
                )
            await self._sleep(CHECK_EVERY if not self.indexed_by_kind else 0.5)
