"""`pallas_active_conversations` of one agent, kept current without making a turn wait."""

from __future__ import annotations

import asyncio
import contextlib

from pallas_runtime.conversations.model import ConversationStore, StoreUnavailable
from pallas_runtime.metrics import RuntimeMetrics

GAUGE_REFRESH = 10.0
"""Seconds between counts of a store's conversations (other replicas' turns, the TTL sweep)."""


class ConversationGauge:
    """Counts the agent's stored conversations into its gauge."""

    def __init__(self, agent: str, store: ConversationStore, metrics: RuntimeMetrics) -> None:
        self._agent = agent
        self._store = store
        self._metrics = metrics
        self._counting: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Count now; an unreachable store leaves the last count."""
        with contextlib.suppress(StoreUnavailable):
            self._metrics.active_conversations.labels(self._agent).set(await self._store.count(self._agent))

    async def changed(self, *, count_changed: bool) -> None:
        """A turn or a delete may have changed the count.

        Counting a memory store costs nothing, and any turn may expire or evict others. A
        database's count changes here only when a conversation is created or deleted (other
        replicas' turns and the TTL sweep are counted every GAUGE_REFRESH); it is counted in the
        background, at most one count in flight, so a turn never waits on it.
        """
        if self._store.kind == "memory":
            await self.refresh()
        elif count_changed and (self._counting is None or self._counting.done()):
            self._counting = asyncio.create_task(self.refresh())

    async def keep(self) -> None:
        """Count every GAUGE_REFRESH seconds, until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(GAUGE_REFRESH)
