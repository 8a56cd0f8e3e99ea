"""Where a catalogue comes from: the interface the HTTP app reads and every source implements.

A source owns a `CatalogueStore`, fills it from what it observes, and says when its first full
view is in (`ready`, which `/readyz` reports). `run()` keeps it current until cancelled; the HTTP
app starts it in its lifespan. Sources count their restarts by reason for `/metrics`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable

from pallas_registry.catalogue import CatalogueStore
from pallas_registry.providers import ProviderTarget
from pallas_registry.state import AgentState


class CatalogueSource(abc.ABC):
    """Base of the Kubernetes, static and in-memory sources."""

    def __init__(self, store: CatalogueStore | None = None) -> None:
        """Start with an empty store (or the given one), not ready."""
        self.store = store or CatalogueStore()
        self.restarts: dict[str, int] = {}
        self._connected = False
        self._ready = asyncio.Event()

    @property
    def connected(self) -> bool:
        """Whether the source reaches what it watches right now (false during an outage)."""
        return self._connected

    @property
    def ready(self) -> bool:
        """Whether the first complete view is in the store."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Return once the first complete view is in the store."""
        await self._ready.wait()

    def mark_ready(self) -> None:
        """Record that the store holds a complete view (idempotent)."""
        self._ready.set()

    def count_restart(self, reason: str) -> None:
        """Count one restart of the watch (or poll) loop; `reason` is a bounded label."""
        self.restarts[reason] = self.restarts.get(reason, 0) + 1

    def provider_targets(self) -> list[ProviderTarget]:
        """The LLM providers this registry checks now (none unless the source knows keys)."""
        return []

    @abc.abstractmethod
    async def run(self) -> None:
        """Keep the store current until cancelled; never returns otherwise."""


class MemorySource(CatalogueSource):
    """Agent states handed in by the caller (embedding, tests, benchmarks); ready at once."""

    def __init__(self, states: Iterable[AgentState] = (), store: CatalogueStore | None = None) -> None:
        """Publish `states`; later changes go through `self.store` (`upsert`, `remove`, ...)."""
        super().__init__(store)
        self.store.replace(states)
        self._connected = True
        self.mark_ready()

    async def run(self) -> None:
        """Nothing to watch: wait until cancelled."""
        await asyncio.Event().wait()
