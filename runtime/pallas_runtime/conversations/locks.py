"""Per-conversation locks inside one process: one turn of a conversation at a time.

A lock lives exactly as long as someone holds or waits for it, and is the same object for
everyone asking under one key meanwhile. (A lock kept in the conversation object was dropped
with a failed first turn while the next turn waited on it; a third turn then made a new one and
ran beside the second, whose messages were lost.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class KeyedLocks:
    """Locks by key, created on first use and dropped when nobody holds or waits for them."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for."""
        return len(self._locks)

    def held(self, key: Hashable) -> bool:
        """Whether a turn holds or waits for `key`."""
        return key in self._locks

    def users(self, key: Hashable) -> int:
        """How many turns hold or wait for `key` (0, 1 holding, more: the others wait)."""
        entry = self._locks.get(key)
        return entry[1] if entry is not None else 0

    @asynccontextmanager
    async def hold(self, key: Hashable, patience: float) -> AsyncIterator[None]:
        """Hold `key`'s lock for the block.

        Raises:
            TimeoutError: the lock was not free within `patience` seconds.
        """
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with asyncio.timeout(patience):
                await lock.acquire()
            try:
                yield
            finally:
                lock.release()
        finally:
            lock_now, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock_now, users - 1)
