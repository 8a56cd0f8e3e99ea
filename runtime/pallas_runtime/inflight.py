"""The send_message calls running now, and how a stopping agent drains them.

A stopping agent (SIGTERM: a rollout, a scale-down, a deleted pod; Ctrl-C or a restart under
`pallas run`) first lets its turns in flight finish, for at most its drain timeout
(`drainSeconds`). Only the turns still running when that runs out are interrupted: each is
cancelled, kept in its conversation as failed (`TurnFailure`, code `AGENT_SHUTTING_DOWN`) when it
held one, and its caller is told so with the same code, marked retryable. A call that comes after
the interruption is refused with that code; nothing of it ran.

Before, SIGTERM cancelled every turn at once and kept nothing of them ("… is shutting down; the
message was not processed"): every spec edit, key rotation and upgrade rolled the pods and failed
the turns in flight, which can run for minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from pallas_api.errors import ErrorCode
from pallas_runtime.messages import TurnFailure

INTERRUPT_GRACE_SECONDS = 10.0
"""How long interrupted turns get to be kept as failed and answered (a database commit each)."""


class ShuttingDown(Exception):
    """The agent is stopping: the call was not processed, or its turn was interrupted.

    `kept`: the interrupted turn is in its conversation, as failed. `refused`: the call came after
    the drain and none of it ran.
    """

    def __init__(self, message: str, *, kept: bool = False, refused: bool = False) -> None:
        super().__init__(message)
        self.kept = kept
        self.refused = refused


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    """How a drain went: the calls that finished in it, and those it interrupted."""

    finished: int
    interrupted: int
    seconds: float
    """From the start of the drain until no call was left (or the interruption grace ran out)."""


class InFlight:
    """Tracks running send_message calls; `drain()` lets them finish, then interrupts the rest."""

    def __init__(self, agent: str) -> None:
        self._agent = agent
        self._tasks: set[asyncio.Task[object]] = set()
        self._interrupted: set[asyncio.Task[object]] = set()
        self._finishing: set[asyncio.Task[object]] = set()
        """Calls storing their finished turn: never interrupted (a commit cut short is a turn
        neither kept for sure nor lost for sure)."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._hurry = asyncio.Event()
        self._ended = 0
        """Calls that ended, not counting those interrupted."""
        self._drain_seconds: float | None = None
        self.draining = False
        """A drain has begun (the turns in flight may still finish)."""
        self.stopping = False
        """The drain is over: running calls were interrupted and new ones are refused."""

    @property
    def count(self) -> int:
        """Calls running now (what `busyAt` is compared with)."""
        return len(self._tasks)

    def refusal(self) -> str:
        """What a call that comes after the drain is told."""
        return f"agent {self._agent} is shutting down; the message was not processed: send it again"

    def _why(self) -> str:
        if self._drain_seconds is None or self._hurry.is_set():
            return "it was told to stop at once"
        return f"its drain of {self._drain_seconds:g}s ran out"

    def _cut_short(self, kept: bool) -> str:
        """What the caller of an interrupted turn is told."""
        what = "the message is kept in the conversation as a failed turn" if kept else "nothing was kept"
        return (
            f"agent {self._agent} stopped before it finished this turn ({self._why()}); {what}: send it again"
        )

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Run a call as one in flight.

        Raises:
            ShuttingDown: the agent stopped before the call, or interrupted it.
        """
        if self.stopping:
            raise ShuttingDown(self.refusal(), refused=True)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._idle.clear()
        interrupted = False
        try:
            yield
        except ShuttingDown:
            interrupted = True  # kept as failed (see `take_interruption`), or refused by the store
            raise
        except asyncio.CancelledError:
            if task not in self._interrupted:
                raise
            self._interrupted.discard(task)
            task.uncancel()  # our cancel, answered here: the task goes on to reply
            interrupted = True
            raise ShuttingDown(self._cut_short(kept=False)) from None
        finally:
            if not interrupted:
                self._ended += 1
            self._tasks.discard(task)
            self._interrupted.discard(task)
            self._finishing.discard(task)
            if not self._tasks:
                self._idle.set()

    def finishing(self) -> None:
        """The running call's turn is done and being stored: a drain running out lets it finish."""
        task = asyncio.current_task()
        if task in self._tasks:
            self._finishing.add(task)

    def take_interruption(self) -> TurnFailure | None:
        """If the drain interrupted the running task: clear its cancellation and say why, else None.

        Called where an interrupted turn still holds its conversation, to keep it as failed
        before answering `interrupted_error()`.
        """
        task = asyncio.current_task()
        if task is None or task not in self._interrupted:
            return None
        self._interrupted.discard(task)
        task.uncancel()
        return TurnFailure(
            ErrorCode.AGENT_SHUTTING_DOWN.value,
            f"the agent stopped before this turn finished ({self._why()})",
        )

    def interrupted_error(self, *, kept: bool) -> ShuttingDown:
        """The error the caller of an interrupted turn gets."""
        return ShuttingDown(self._cut_short(kept=kept), kept=kept)

    def hurry(self) -> None:
        """End a drain's wait now: interrupt what still runs (a second Ctrl-C)."""
        self._hurry.set()

    async def drain(self, seconds: float) -> DrainOutcome:
        """Let the running calls finish for at most `seconds`, then interrupt those left.

        New calls are still taken while it waits (callers on open sessions; the agent's edge
        refuses new sessions). Interrupted calls get `INTERRUPT_GRACE_SECONDS` to be kept and
        answered; afterwards every new call is refused.
        """
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.draining = True
        self._drain_seconds = seconds
        ended_before = self._ended
        idle = asyncio.ensure_future(self._idle.wait())
        hurried = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait({idle, hurried}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            hurried.cancel()
        interrupted = self.interrupt()
        if interrupted:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), INTERRUPT_GRACE_SECONDS)
        return DrainOutcome(self._ended - ended_before, interrupted, loop.time() - began)

    def interrupt(self) -> int:
        """Refuse new calls and cancel the running ones (each answers as interrupted); how many.

        Calls already storing their finished turn are left to finish (`finishing`).
        """
        self.stopping = True
        running = [task for task in self._tasks if task not in self._finishing]
        for task in running:
            self._interrupted.add(task)
            task.cancel()
        return len(running)
