"""A stateful downstream server's sessions: one per caller conversation, bounded, closed when idle.

A server that keeps state per MCP session (a shell's working directory, a browser page) must
never mix callers: on the one shared session, the second user would find the first one's page.
For a server marked `stateful`, every caller conversation (`ConversationKey`: the agent, the
caller, the conversation id) gets a session of its own, kept open across the conversation's
turns, so its state carries from one turn to the next and reaches nobody else.

They are bounded: at most `sessions.maxSessions` open at once (the one unused longest with no
call in flight is closed to make room; when every one is in the middle of a call, the new
conversation's call fails with SERVER_UNAVAILABLE rather than wait), and a session no call has
used for `sessions.idleTimeoutSeconds` is closed. Deleting a conversation closes its session at
once. Each session says `connected` and `lost` in the log (`SharedSession`), and why it was
closed; it is named by a digest of its key, never by the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from mcp import ClientSession

from pallas_api.fields import ServerSessionLimits
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.connection import BearerSlot, SharedSession
from pallas_runtime.downstream.failures import HttpErrorRecorder
from pallas_runtime.downstream.source import DownstreamError

log = logging.getLogger("pallas.downstream")

SessionOpener = Callable[[BearerSlot, HttpErrorRecorder], AbstractAsyncContextManager[ClientSession]]
"""Opens one session whose requests carry the slot's bearer and report to the recorder."""


def session_tag(key: ConversationKey) -> str:
    """How the log names a conversation's session: stable, and nothing of the caller readable."""
    digest = hashlib.sha256("\0".join((key.agent, key.owner, key.id)).encode()).hexdigest()
    return f"c-{digest[:10]}"


@dataclass(eq=False)
class _Kept:
    """One conversation's session."""

    tag: str
    session: SharedSession
    bearer: BearerSlot
    last_used: float
    in_flight: int = 0
    ended: bool = False
    """Its conversation ended while a call was using it: closed when that call is over."""


class ConversationSessions:
    """The sessions of one stateful server, by caller conversation."""

    def __init__(
        self,
        server: str,
        limits: ServerSessionLimits,
        opener: SessionOpener,
        on_lost: Callable[[], None],
    ) -> None:
        self._server = server
        self._limits = limits
        self._opener = opener
        self._on_lost = on_lost
        self._kept: OrderedDict[ConversationKey, _Kept] = OrderedDict()
        """Least recently used first."""
        self._closing: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._kept)

    @contextlib.asynccontextmanager
    async def use(self, key: ConversationKey, bearer: str | None) -> AsyncIterator[SharedSession]:
        """The conversation's session for one call (opened on its first request).

        `bearer` is the call's forwarded `Authorization`, if any: the session's requests carry the
        latest one its conversation gave.

        Raises:
            DownstreamError: every session is busy with a call, so none can make room.
        """
        loop = asyncio.get_running_loop()
        kept = self._kept.get(key)
        if kept is None:
            self._make_room()
            bearer_slot = BearerSlot()
            tag = session_tag(key)
            kept = _Kept(
                tag,
                SharedSession(
                    f"{self._server} session {tag}",
                    lambda recorder: self._opener(bearer_slot, recorder),
                    on_lost=self._on_lost,
                    server=self._server,
                    session=tag,
                ),
                bearer_slot,
                loop.time(),
            )
            self._kept[key] = kept
        self._kept.move_to_end(key)
        if bearer is not None:
            kept.bearer.value = bearer
        kept.in_flight += 1
        try:
            yield kept.session
        finally:
            kept.in_flight -= 1
            kept.last_used = loop.time()
            if kept.ended and not kept.in_flight and self._kept.get(key) is kept:
                self._close(key, "its conversation ended")
            self._keep_sweeping()

    def _make_room(self) -> None:
        if self._closed:
            raise DownstreamError(f"{self._server}: the agent is stopping")
        if len(self._kept) < self._limits.max_sessions:
            return
        for key, kept in self._kept.items():  # least recently used first
            if not kept.in_flight:
                self._close(key, f"to make room: sessions.maxSessions is {self._limits.max_sessions}")
                return
        raise DownstreamError(
            f"{self._server}: all {self._limits.max_sessions} sessions (mcpServers.{self._server}."
            "sessions.maxSessions) are in use by calls of other conversations; try again shortly"
        )

    def _close(self, key: ConversationKey, why: str) -> None:
        kept = self._kept.pop(key)
        log.info("%s session %s: closed (%s)", self._server, kept.tag, why, extra={"server": self._server})
        task = asyncio.create_task(kept.session.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _keep_sweeping(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name=f"idle-sessions-{self._server}")

    async def _sweep(self) -> None:
        """Close sessions idle for the timeout, waking when the next one would be."""
        loop = asyncio.get_running_loop()
        timeout = self._limits.idle_timeout_seconds
        while self._kept:
            now = loop.time()
            for key, kept in list(self._kept.items()):
                if not kept.in_flight and now - kept.last_used >= timeout:
                    self._close(key, f"idle for {timeout}s: sessions.idleTimeoutSeconds")
            idle = [kept.last_used for kept in self._kept.values() if not kept.in_flight]
            await asyncio.sleep(min(idle) + timeout - now if idle else timeout)

    async def release(self, key: ConversationKey) -> None:
        """The conversation is over (deleted, or a turn that keeps none): close its session."""
        kept = self._kept.get(key)
        if kept is None:
            return
        if kept.in_flight:
            kept.ended = True
        else:
            self._close(key, "its conversation ended")

    async def aclose(self) -> None:
        """Close every session (the agent stops)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for key in list(self._kept):
            self._close(key, "the agent is stopping")
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
