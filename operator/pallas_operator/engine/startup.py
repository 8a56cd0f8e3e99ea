"""Whether the operator can act yet: every object that existed at start-up is in the world.

kopf's own start-up barrier (kopf indexes) costs O(N²) over N existing objects, so the operator
keeps its own indexes and its own barrier: it lists every watched kind once (with the watches'
selectors) and holds the work queue until each listed object has come through the watches and
been recorded. Then the start-up steps that need the whole world run (the orphan sweep), the
queue starts and `/readyz` says ready: reconciles never decide on half a world (an agent whose
deployment was not seen yet would be marked DeploymentNotFound and written).

Objects deleted between the listing and the watch would never come: while not ready, and no object
came in the last `RELIST_EVERY` seconds, the kinds are listed again and only what still exists
is waited for. A start-up that
takes long is logged every `stall_after` seconds with how far it got, and `/metrics` shows it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from pallas_operator.engine.indexes import ObjectKey
from pallas_operator.metrics import OperatorMetrics

log = logging.getLogger(__name__)
RELIST_EVERY = 5.0
"""Seconds between looks at the start-up's progress; one without progress lists again."""

Listing = Callable[[], Awaitable[set[ObjectKey]]]
"""Every watched object that exists now (with the watches' selectors, in the watched namespaces)."""
StartupStep = Callable[[], Awaitable[object]]
"""Work that needs the whole world and must end before the first reconcile (the orphan sweep)."""


class StartupTracker:
    """Counts the objects seen by kind and decides readiness."""

    def __init__(
        self,
        metrics: OperatorMetrics,
        ready: threading.Event,
        stall_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_ready: Callable[[], None] = lambda: None,
    ) -> None:
        self._metrics = metrics
        self._ready = ready
        self._stall_after = stall_after
        self._clock = clock
        self._sleep = sleep
        self._on_ready = on_ready
        self._seen: set[ObjectKey] = set()
        self._waiting: set[ObjectKey] | None = None
        """Listed objects not seen yet; None until the first listing answered."""
        self._recorded = asyncio.Event()
        """Set once every listed object is recorded; readiness follows the start-up steps."""
        self.indexed_by_kind: Counter[str] = Counter()

    @property
    def ready(self) -> bool:
        """Whether the world is whole, the start-up steps ran and reconciles run."""
        return self._ready.is_set()

    def indexed(self, key: ObjectKey) -> None:
        """An object's event was recorded in the world."""
        kind = key[0]
        self.indexed_by_kind[kind] += 1
        self._metrics.watch_events.labels(kind=kind, stage="indexed").inc()
        if self._ready.is_set():
            return
        self._seen.add(key)
        if self._waiting is not None:
            self._waiting.discard(key)
            if not self._waiting:
                self._recorded.set()

    def handled(self, kind: str) -> None:
        """An object's event was routed to the work queue."""
        self._metrics.watch_events.labels(kind=kind, stage="handled").inc()

    def _become_ready(self) -> None:
        if self._ready.is_set():
            return
        self._ready.set()
        self._metrics.ready.set(1)
        log.info("ready: %d objects recorded at start-up", len(self._seen))
        self._seen.clear()
        self._waiting = None
        self._on_ready()

    async def watch(self, listing: Listing, before_ready: StartupStep | None = None) -> None:
        """Wait until every object that exists is recorded, then run `before_ready` and become ready.

        Until then the watched kinds are listed again after every `RELIST_EVERY` seconds in which
        no object came, and a slow start-up is logged every `stall_after` seconds. Becoming ready
        starts the work queue.
        """
        started = self._clock()
        next_report = started + self._stall_after
        left_at_listing: int | None = None
        while not self._recorded.is_set():
            left = len(self._waiting) if self._waiting is not None else None
            # Listed again only when nothing came since the last listing (an object deleted
            # before the watch saw it is then what holds the start-up): while the watches
            # deliver, each listing of every watched object would only cost the API server and
            # this process (a fifth of the operator's CPU at a restart over 2,500 agents).
            if left is None or left == left_at_listing:
                try:
                    existing = await listing()
                except Exception as exc:  # noqa: BLE001 - the API server may not answer yet; look again
                    log.warning("could not list the watched kinds yet: %s", exc)
                else:
                    if not self._recorded.is_set():
                        self._waiting = existing - self._seen
                        left_at_listing = len(self._waiting)
                        if not self._waiting:
                            self._recorded.set()
            else:
                left_at_listing = left
            if self._recorded.is_set():
                break
            if self._clock() >= next_report:
                next_report += self._stall_after
                waiting = sorted(self._waiting or ())
                log.warning(
                    "start-up has not finished after %.0fs; nothing is reconciled until it does "
                    "(%d objects recorded, %s still to come%s)",
                    self._clock() - started,
                    len(self._seen),
                    len(waiting) if self._waiting is not None else "the listing has not answered;",
                    f", e.g. {'/'.join(waiting[0])}" if waiting else "",
                )
            await self._pause(RELIST_EVERY)
        if before_ready is not None:
            await before_ready()
        self._become_ready()

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less when the last object is recorded meanwhile."""
        waits = {asyncio.ensure_future(self._sleep(seconds)), asyncio.ensure_future(self._recorded.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
