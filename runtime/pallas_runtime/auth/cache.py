"""A small, bounded cache of decisions, keyed by a digest of the bearer (never the bearer itself).

Entries live `ttl` seconds (or until the bearer expires, if sooner) and the least recently used
go first beyond `max_entries`, so a flood of distinct tokens costs bounded memory. Concurrent
misses of one bearer share one lookup, so a burst of requests with a new token makes one
TokenReview, not one per request. Failures (the API server down) are never cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pallas_runtime.auth.identity import Decision

Lookup = Callable[[], Awaitable[Decision | None]]


def token_key(token: str) -> str:
    """The cache key of a bearer: its SHA-256, so the cache never holds a usable credential."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Entry:
    decision: Decision | None
    until: float


class DecisionCache:
    """TTL + LRU cache of decisions (None: the bearer did not authenticate)."""

    def __init__(
        self, ttl: float, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[Decision | None]] = {}
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every decision, and keep none of the lookups under way (the rules changed)."""
        self._entries.clear()
        self._inflight.clear()
        self._epoch += 1

    def get(self, key: str) -> tuple[bool, Decision | None]:
        """(hit, decision): a live entry moves to the most recently used end."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry.until <= self._clock():
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, entry.decision

    def put(self, key: str, decision: Decision | None) -> None:
        """Keep a decision for the TTL, or until the bearer expires if that comes first."""
        if self._ttl <= 0:
            return
        now = self._clock()
        until = now + self._ttl
        if decision is not None and decision.expires_at is not None:
            until = min(until, now + decision.expires_at - time.time())
        if until <= now:
            return
        self._entries[key] = _Entry(decision, until)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    async def decide(self, key: str, lookup: Lookup) -> tuple[Decision | None, bool]:
        """(decision, from cache): a cached one, else `lookup()`'s, shared by concurrent callers.

        Raises:
            Whatever `lookup` raises (not cached; every waiting caller sees it).
        """
        hit, decision = self.get(key)
        if hit:
            return decision, True
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending), False
        future: asyncio.Future[Decision | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        epoch = self._epoch
        try:
            decision = await lookup()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a burst with no other waiter logs nothing
            raise
        else:
            if epoch == self._epoch:
                self.put(key, decision)
            future.set_result(decision)
            return decision, False
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]
