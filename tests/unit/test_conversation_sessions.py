"""`ConversationSessions`: the bounds and the idle timeout of a stateful server's sessions.

The sessions are opened by a fake opener (it counts what it opened and closed); the idle
timeout runs on looptime's fake loop clock. The integration tests
(tests/integration/runtime/test_stateful_servers.py) drive the same through a real server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pallas_api.fields import ServerSessionLimits
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.downstream.connection import BearerSlot
from pallas_runtime.downstream.conversation_sessions import ConversationSessions, session_tag
from pallas_runtime.downstream.failures import HttpErrorRecorder
from pallas_runtime.downstream.source import DownstreamError


class StandIn:
    """What an opened session is here: an object of its own (weakly referable, as a session is)."""


class Opener:
    """Opens stand-in sessions: each is a fresh object; records openings and closings."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.bearers: list[BearerSlot] = []

    @contextlib.asynccontextmanager
    async def __call__(self, bearer: BearerSlot, recorder: HttpErrorRecorder) -> AsyncIterator[Any]:
        self.opened += 1
        self.bearers.append(bearer)
        try:
            yield StandIn()
        finally:
            self.closed += 1


def key(conversation: str, owner: str = "sub:alice") -> ConversationKey:
    return ConversationKey("harper", owner, conversation)


def sessions(opener: Opener, **limits: int) -> ConversationSessions:
    return ConversationSessions("shell", ServerSessionLimits(**limits), opener, on_lost=lambda: None)


async def touch(pool: ConversationSessions, k: ConversationKey, bearer: str | None = None) -> object:
    async with pool.use(k, bearer) as kept:
        return await kept.get()


async def test_each_caller_and_conversation_has_a_session_of_its_own() -> None:
    opener = Opener()
    pool = sessions(opener)
    alice_a = await touch(pool, key("a"))
    assert await touch(pool, key("a")) is alice_a
    bob_a = await touch(pool, key("a", owner="sub:bob"))
    alice_b = await touch(pool, key("b"))
    assert len({id(alice_a), id(bob_a), id(alice_b)}) == 3
    assert opener.opened == 3
    await pool.aclose()
    assert opener.closed == 3


async def test_a_full_pool_closes_the_session_unused_longest_but_never_a_busy_one() -> None:
    opener = Opener()
    pool = sessions(opener, max_sessions=2)
    await touch(pool, key("a"))
    await touch(pool, key("b"))
    async with pool.use(key("a"), None) as busy_a:
        await busy_a.get()
        await touch(pool, key("c"))  # b is unused longest among the idle ones (a is busy)
        assert len(pool) == 2
        async with pool.use(key("c"), None):
            with pytest.raises(DownstreamError, match=r"all 2 sessions .*maxSessions"):
                await touch(pool, key("d"))
    await asyncio.sleep(0)  # the evicted session's close runs in the background
    assert opener.closed == 1
    await pool.aclose()


async def test_the_latest_bearer_of_the_conversation_is_sent() -> None:
    opener = Opener()
    pool = sessions(opener)
    await touch(pool, key("a"), "Bearer one")
    await touch(pool, key("a"), "Bearer two")
    assert [slot.value for slot in opener.bearers] == ["Bearer two"]
    await pool.aclose()


async def test_a_conversation_ending_mid_call_is_closed_when_the_call_is_over() -> None:
    opener = Opener()
    pool = sessions(opener)
    async with pool.use(key("a"), None) as kept:
        await kept.get()
        await pool.release(key("a"))
        assert len(pool) == 1
    assert len(pool) == 0
    await pool.aclose()
    assert opener.closed == 1


@pytest.mark.looptime
async def test_an_idle_session_closes_after_the_timeout(looptime: float) -> None:
    opener = Opener()
    pool = sessions(opener, idle_timeout_seconds=60)
    await touch(pool, key("a"))
    await asyncio.sleep(30)
    await touch(pool, key("b"))
    await asyncio.sleep(31)  # a: idle 61 s; b: 31 s
    assert len(pool) == 1
    await asyncio.sleep(30)
    assert len(pool) == 0
    await asyncio.sleep(1)
    assert opener.closed == 2
    await pool.aclose()


def test_the_log_names_a_session_by_a_digest_of_its_key() -> None:
    tag = session_tag(key("a", owner="sub:alice@example.com"))
    assert tag.startswith("c-")
    assert "alice" not in tag
    assert tag == session_tag(key("a", owner="sub:alice@example.com"))
