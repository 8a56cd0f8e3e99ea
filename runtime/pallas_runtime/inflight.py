"""The send_message calls running now, so that a stopping agent ends them at once and says why.

Without this, SIGTERM left calls running until uvicorn's graceful timeout (10 s) cut their
streams, and clients saw "SSE stream ended without a response". Now the process first stops the
calls in flight, each answering "agent … is shutting down" (nothing of the turn is kept), and
refuses new ones; the server then closes with nothing left to wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class ShuttingDown(Exception):
    """The agent is stopping: the call was not (or not completely) processed."""


class InFlight:
    """Tracks running calls; `stop()` cancels them and refuses new ones."""

    def __init__(self, agent: str) -> None:
        self._agent = agent
        self._tasks: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.stopping = False

    def _stopped(self) -> bool:
        return self.stopping

    @property
    def count(self) -> int:
        """Calls running now (what `busyAt` is compared with)."""
        return len(self._tasks)

    def message(self) -> str:
        """What a caller is told."""
        return f"agent {self._agent} is shutting down; the message was not processed: send it again"

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Run a call as one in flight.

        Raises:
            ShuttingDown: the agent is stopping (before the call, or while it ran).
        """
        if self._stopped():
            raise ShuttingDown(self.message())
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._idle.clear()
        try:
            yield
        except asyncio.CancelledError:
            if not self._stopped():
                raise
            task.uncancel()  # our cancel, answered here: the task goes on to reply
            raise ShuttingDown(self.message()) from None
        finally:
            self._tasks.discard(task)
            if not self._tasks:
                self._idle.set()

    async def stop(self, grace: float = 5.0) -> int:
        """Refuse new calls, cancel the running ones and wait (at most `grace`) until they answered."""
        self.stopping = True
        running = list(self._tasks)
        for task in running:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        return len(running)
