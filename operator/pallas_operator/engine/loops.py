"""One task per key, each following a target that may change: the prober's and the report reader's.

`track(key, target)` starts a loop for a new key, hands a changed target to a running one (and
wakes it), and `track(key, None)` stops it and forgets what it found; `stop()` ends them all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class Looping(Generic[T]):
    """The state of one key's loop; subclasses add what their loop keeps."""

    target: T
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def pause(self, seconds: float) -> None:
        """Wait `seconds`, or less when the target changes meanwhile."""
        self.wake.clear()
        # `asyncio.timeout`, not `wait_for`: on Python 3.11 a `wait_for` whose wait ends in the
        # same step as the task's cancellation returns and drops the cancellation, so a loop
        # woken by a new target and stopped at once (a reconcile, then `stop`) ran on forever.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.wake.wait()


S = TypeVar("S", bound=Looping[Any])


class KeyedLoops(Generic[T, S]):
    """The loops by key: `new(target)` makes a key's state, `run(key, state)` is its loop."""

    def __init__(
        self,
        new: Callable[[T], S],
        run: Callable[[Hashable, S], Coroutine[Any, Any, None]],
        name: str,
    ) -> None:
        self._new = new
        self._run = run
        self._name = name
        self._states: dict[Hashable, S] = {}

    def get(self, key: Hashable) -> S | None:
        """The state of `key`'s loop, if one runs."""
        return self._states.get(key)

    def track(self, key: Hashable, target: T | None) -> None:
        """Follow `target` for `key` from now on; None stops the loop and forgets its state."""
        state = self._states.get(key)
        if target is None:
            if state is not None:
                del self._states[key]
                if state.task is not None:
                    state.task.cancel()
            return
        if state is None:
            state = self._states[key] = self._new(target)
            state.task = asyncio.create_task(self._run(key, state), name=f"{self._name}-{key}")
        elif state.target != target:
            state.target = target
            state.wake.set()

    async def stop(self) -> None:
        """Stop every loop."""
        tasks = [s.task for s in self._states.values() if s.task is not None]
        self._states.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
