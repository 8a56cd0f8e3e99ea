"""The contract every conversation store keeps, as test functions over a store factory.

Unit tests run them against the memory and SQLite stores; integration tests against PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastmcp import Client
from mcp_types import TextContent

from pallas_runtime.conversations import tenancy
from pallas_runtime.conversations.locks import KeyedLocks
from pallas_runtime.conversations.model import (
    ConversationBusy,
    ConversationKey,
    ConversationStore,
)
from pallas_runtime.conversations.sql import SqlStore
from pallas_runtime.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from tests.support import waiting

StoreFactory = Callable[..., AbstractAsyncContextManager[ConversationStore]]
"""`factory(max_messages=..., turn_wait=..., ttl_seconds=...)` → a started store, closed on exit."""


WAIT = 10.0
"""Loop seconds a contract check waits for a turn to reach the state it orders on."""


def key(id_: str = "c1", owner: str = "anonymous", agent: str = "harper") -> ConversationKey:
    return ConversationKey(agent, owner, id_)


def turns_on(store: ConversationStore, k: ConversationKey) -> int:
    """Turns of this process holding or waiting for the conversation (0: none, 2: one waits).

    Every store serializes a process's turns on its `KeyedLocks` before anything else; a test
    reads it to know that a turn is queued, which nothing else shows.
    """
    locks: KeyedLocks = store._locks  # type: ignore[attr-defined]
    return locks.users(k)


async def until(check: Callable[[], bool], what: str, within: float = WAIT) -> None:
    """Yield to the loop until `check()` holds; fail naming `what` after `within` loop seconds."""
    await waiting.until(what, check, within, interval=0.001, clock=asyncio.get_running_loop().time)


async def wall_clock_moved() -> None:
    """Return once the wall clock reads later than when called.

    Stores order threads by the wall-clock time of their last commit (microseconds); a commit
    after this one carries a later time than every commit before it, on the fake loop clock too.
    """
    start = datetime.now(UTC)
    while True:  # a few microseconds: yield meanwhile, no timer (fake loop time does not move)
        await asyncio.sleep(0)
        if datetime.now(UTC) > start:
            return


def turn(n: int, with_tools: bool = False) -> list[Message]:
    """One turn: user, (assistant with a call, tool results,) assistant."""
    user = UserMessage((TextPart(f"question {n}"),))
    if not with_tools:
        return [user, AssistantMessage(f"answer {n}")]
    call = ToolCall(f"call-{n}", "argos__search", {"q": n})
    return [
        user,
        AssistantMessage("", (call,)),
        ToolResultsMessage((ToolResult(call.id, call.name, (TextPart("r"),)),)),
        AssistantMessage(f"answer {n}"),
    ]


async def commit(store: ConversationStore, k: ConversationKey, messages: list[Message]) -> None:
    async with store.turn(k) as held:
        await held.commit(messages, f"title of {k.id}")


async def a_committed_turn_is_read_back_and_trimmed_at_turn_boundaries(factory: StoreFactory) -> None:
    async with factory(max_messages=5) as store:
        assert await store.history(key()) is None
        await commit(store, key(), turn(1, with_tools=True))
        assert await store.history(key()) == turn(1, with_tools=True)
        await commit(store, key(), turn(2))
        # 6 messages > 5: the oldest whole turn goes, never half of one.
        assert await store.history(key()) == turn(2)
        await commit(store, key(), turn(3, with_tools=True))
        assert await store.history(key()) == turn(3, with_tools=True)
        (info,) = await store.threads("harper", "anonymous")
        assert (info.id, info.title, info.message_count) == ("c1", "title of c1", 4)


async def a_turn_left_without_commit_stores_nothing(factory: StoreFactory) -> None:
    async with factory() as store:
        with pytest.raises(RuntimeError):
            async with store.turn(key()):
                raise RuntimeError("the LLM failed")
        assert await store.history(key()) is None
        assert await store.threads("harper", "anonymous") == []
        assert await store.count("harper") == 0
        holding = asyncio.Event()
        task = asyncio.create_task(_hold_forever(store, key("cancelled"), holding))
        await asyncio.wait_for(holding.wait(), WAIT)  # cancelled inside its turn, not before it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.history(key("cancelled")) is None
        await commit(store, key("cancelled"), turn(1))  # the hold was released
        assert await store.history(key("cancelled")) == turn(1)


async def _hold_forever(store: ConversationStore, k: ConversationKey, holding: asyncio.Event) -> None:
    async with store.turn(k):
        holding.set()
        await asyncio.Event().wait()


async def turns_of_one_conversation_run_one_at_a_time_even_after_a_failed_first_turn(
    factory: StoreFactory,
) -> None:
    """The lost-turn race: A fails as the first turn while B waits; C comes after A failed.

    Each step waits for the one before: B is queued behind A when A fails, and whichever of B
    and C runs first keeps its turn until the other one is queued behind it (or runs beside it,
    which the check on entry reports).
    """
    async with factory() as store:
        a_holding, a_may_fail = asyncio.Event(), asyncio.Event()
        entered = {name: asyncio.Event() for name in "ABC"}
        seen: dict[str, list[Message]] = {}
        running: set[str] = set()

        async def run(name: str, n: int, fail: bool = False) -> None:
            async with store.turn(key()) as held:
                entered[name].set()
                assert not running, f"{name} ran beside {running}"
                running.add(name)
                seen[name] = list(held.history)
                if name == "A":
                    a_holding.set()
                    await a_may_fail.wait()
                else:
                    other = entered["C" if name == "B" else "B"]
                    await until(
                        lambda: other.is_set() or turns_on(store, key()) >= 2,
                        f"the other turn queued behind {name}",
                    )
                running.discard(name)
                if fail:
                    raise RuntimeError("first turn failed")
                await held.commit(turn(n), "t")

        a = asyncio.create_task(run("A", 0, fail=True))
        await asyncio.wait_for(a_holding.wait(), WAIT)
        b = asyncio.create_task(run("B", 1))
        await until(lambda: turns_on(store, key()) == 2, "B queued behind A")
        a_may_fail.set()
        with pytest.raises(RuntimeError):
            await a
        c = asyncio.create_task(run("C", 2))
        await asyncio.gather(b, c)
        history = await store.history(key())
        assert history is not None
        # Both finished turns are stored, one after the other; the second saw the first.
        assert history in (turn(1) + turn(2), turn(2) + turn(1))
        assert seen["A"] == []
        assert [seen["B"], seen["C"]] in ([[], turn(1)], [turn(2), []])


async def callers_never_see_each_others_conversations(factory: StoreFactory) -> None:
    async with factory() as store:
        await commit(store, key("shared-id", owner="sub:alice"), turn(1))
        await commit(store, key("shared-id", owner="sub:bob"), turn(2))
        assert await store.history(key("shared-id", owner="sub:alice")) == turn(1)
        assert await store.history(key("shared-id", owner="sub:bob")) == turn(2)
        assert [t.id for t in await store.threads("harper", "sub:alice")] == ["shared-id"]
        assert await store.threads("harper", "anonymous") == []
        assert await store.threads("other-agent", "sub:alice") == []
        assert not await store.delete(key("shared-id", owner="anonymous"))
        assert await store.delete(key("shared-id", owner="sub:bob"))
        assert await store.history(key("shared-id", owner="sub:bob")) is None
        assert await store.history(key("shared-id", owner="sub:alice")) == turn(1)


async def threads_list_the_most_recent_first(factory: StoreFactory) -> None:
    async with factory() as store:
        for name in ("first", "second", "third"):
            await commit(store, key(name), turn(1))
            await wall_clock_moved()
        await commit(store, key("first"), turn(2))
        threads = await store.threads("harper", "anonymous")
        assert [t.id for t in threads] == ["first", "third", "second"]
        assert [t.message_count for t in threads] == [4, 2, 2]
        assert await store.count("harper") == 3


async def a_turn_waits_for_the_previous_one_then_gives_up(factory: StoreFactory) -> None:
    async with factory(turn_wait=0.3) as store:
        holding = asyncio.Event()
        holder = asyncio.create_task(_hold_forever(store, key(), holding))
        await asyncio.wait_for(holding.wait(), WAIT)
        with pytest.raises(ConversationBusy, match="busy"):
            async with store.turn(key()):
                pass
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder


CONTRACT = [
    a_committed_turn_is_read_back_and_trimmed_at_turn_boundaries,
    a_turn_left_without_commit_stores_nothing,
    turns_of_one_conversation_run_one_at_a_time_even_after_a_failed_first_turn,
    callers_never_see_each_others_conversations,
    threads_list_the_most_recent_first,
    a_turn_waits_for_the_previous_one_then_gives_up,
]


async def threads_can_be_limited_to_the_ids_a_session_named(factory: StoreFactory) -> None:
    async with factory() as store:
        for name in ("a", "b", "c"):
            await commit(store, key(name), turn(1))
        listed = await store.threads("harper", "anonymous", only=["c", "a", "never-stored"])
        assert sorted(t.id for t in listed) == ["a", "c"]
        assert await store.threads("harper", "anonymous", only=[]) == []


CONTRACT.append(threads_can_be_limited_to_the_ids_a_session_named)


async def a_created_conversation_is_listed_empty_keeps_its_settings_and_outlives_a_failed_first_turn(
    factory: StoreFactory,
) -> None:
    async with factory() as store:
        created, started = key("created"), key("started")
        await store.create(created, {"model": "claude.claude-fake"}, "made first")
        assert await store.settings(created) == {"model": "claude.claude-fake"}
        assert [(t.id, t.title, t.message_count) for t in await store.threads("harper", "anonymous")] == [
            ("created", "made first", 0)
        ]
        assert await store.count("harper") == 1
        async with store.turn(created):
            pass  # a first turn that failed: stored nothing, and the conversation stays
        async with store.turn(started):
            pass  # a turn-started one that stored nothing leaves nothing
        assert [t.id for t in await store.threads("harper", "anonymous")] == ["created"]
        await commit(store, created, turn(1))
        assert await store.history(created) == turn(1)
        assert await store.settings(created) == {"model": "claude.claude-fake"}
        assert await store.settings(started) is None
        await commit(store, started, turn(2))
        assert await store.settings(started) is None
        assert await store.delete(created)
        assert await store.settings(created) is None


CONTRACT.append(a_created_conversation_is_listed_empty_keeps_its_settings_and_outlives_a_failed_first_turn)


async def agents_stay_apart_adopt_legacy_rows_and_lose_predecessors_and_abandoned_ones(
    make: Callable[..., SqlStore], suffix: str
) -> None:
    """Tenancy in a SQL store (`tenancy`): run with SQLite and PostgreSQL.

    `make(**options)` builds a SqlStore on the shared database; `suffix` keeps this run's names
    apart from other runs on the same database.
    """
    name = f"keeper{suffix}"
    one, two = f"ns/one/{name}/u1", f"ns/two/{name}/u2"
    stores: list[SqlStore] = []

    async def start(**options: Any) -> SqlStore:
        store = make(**options)
        await store.start()
        stores.append(store)
        return store

    try:
        older = await start()  # an older Pallas: rows keyed by the bare name
        await commit(older, key("old", agent=name), turn(1))
        first = await start(identity=one, legacy_name=name)
        assert await first.history(key("old", agent=one)) == turn(1)
        assert await first.history(key("old", agent=name)) is None
        other = await start(identity=two, legacy_name=name)  # another deployment, same name
        assert await other.history(key("old", agent=two)) is None
        await commit(other, key("x", agent=two), turn(2))
        # one's agent deleted and re-created: its predecessor's conversations go at once.
        recreated = await start(identity=f"ns/one/{name}/u3", legacy_name=name, abandoned_after=3600)
        assert await recreated.history(key("old", agent=one)) is None
        assert await recreated.history(key("x", agent=two)) == turn(2)
        # two's agent stops running: after `abandoned_after`, any agent on the database deletes its rows.
        await recreated.housekeeping()
        assert await recreated.history(key("x", agent=two)) == turn(2)
        long_ago = datetime.now(UTC) - timedelta(hours=2)
        await recreated._transaction(lambda c: tenancy.heartbeat(c, two, long_ago))
        await recreated.housekeeping()
        assert await recreated.history(key("x", agent=two)) is None
    finally:
        for store in stores:
            await store.aclose()


CONVERSATION_META = "pallas.dev/conversationId"


async def send(c: Client[Any], message: str, conversation_id: str | None = None) -> tuple[str, Any]:
    """`send_message` over MCP: the answer, and the conversation the turn was kept in."""
    arguments: dict[str, Any] = {"message": message}
    if conversation_id is not None:
        arguments["conversation_id"] = conversation_id
    result = await c.call_tool("send_message", arguments)
    answer = result.content[0]
    assert isinstance(answer, TextContent), answer
    return answer.text, (result.meta or {}).get(CONVERSATION_META)


def user_texts(request_json: dict[str, Any]) -> list[str]:
    """The user messages of an OpenAI chat request, in order."""
    return [m["content"] for m in request_json["messages"] if m["role"] == "user"]


async def started(store: ConversationStore) -> AsyncIterator[ConversationStore]:
    await store.start()
    try:
        yield store
    finally:
        await store.aclose()
