"""A keyed work queue, as controller-runtime's.

Every trigger of a resource collapses into one pending reconcile, one reconcile per key runs at
a time, failures retry with backoff.

kopf handles each object's own events in order, but a PallasAgent is also reconciled when its
deployment, a dependency, a child or a probe result changes; those triggers arrive from other objects'
handlers. The queue is where they meet, so they never race and a burst of them costs one reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping

from pallas_io.backoff import backoff
from pallas_io.logs import log_fields

log = logging.getLogger(__name__)
Reconcile = Callable[[Hashable], Awaitable[float | None]]
"""Reconciles a key; returns seconds after which to reconcile it again, or None."""
LogFields = Callable[[Hashable], Mapping[str, str]]
"""What a key's log lines concern (`agent`, `deployment`, `namespace`)."""


class WorkQueue:
    """Deduplicating queue with a fixed set of workers."""

    def __init__(
        self,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        max_backoff: float = 60.0,
        fields: LogFields = lambda _: {},
    ) -> None:
        self._reconcile = reconcile
        self._fields = fields
        self._workers = workers
        self._max_backoff = max_backoff
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._pending: set[Hashable] = set()
        self._running: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def depth(self) -> int:
        """Reconciles queued or running."""
        return len(self._pending) + len(self._running)

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        """Ask for a reconcile of `key` (after `delay` seconds); repeated asks collapse into one."""
        if delay > 0:
            if key not in self._timers:
                loop = asyncio.get_running_loop()
                self._timers[key] = loop.call_later(delay, self._fire, key)
            return
        if key in self._running:
            self._dirty.add(key)  # run again once the current reconcile is done
            return
        if key not in self._pending:
            self._pending.add(key)
            self._idle.clear()
            self._queue.put_nowait(key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        """Start the workers."""
        self._tasks = [asyncio.create_task(self._work(), name=f"reconcile-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        """Stop the workers (a running reconcile is cancelled) and drop timers."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def drained(self) -> None:
        """Wait until nothing is queued or running (timers not counted)."""
        await self._idle.wait()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            self._running.add(key)
            again: float | None = None
            try:
                with log_fields(**self._fields(key)):  # every line of the reconcile says what it is about
                    try:
                        again = await self._reconcile(key)
                        self._failures.pop(key, None)
                    except Exception:
                        failures = self._failures[key] = self._failures.get(key, 0) + 1
                        again = backoff(failures, first=0.5, cap=self._max_backoff)
                        log.exception(
                            "reconcile of %s failed (attempt %d); retrying in %.1fs", key, failures, again
                        )
            finally:
                self._running.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif again is not None:
                self.add(key, again)
            if not self._pending and not self._running:
                self._idle.set()
