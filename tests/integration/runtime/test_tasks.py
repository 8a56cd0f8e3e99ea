"""`send_message` as an MCP task (`io.modelcontextprotocol/tasks`, SEP-2663) over real HTTP.

A 2026-07-28 fastmcp client that advertises the tasks extension (`commands.chat.tasks`) gets a
task handle at once; the turn runs on a scripted slow FakeOpenAI while the client's connections
are cut, and a new connection's `tasks/get` returns the answer. `tasks/cancel` stops the turn.
With a database store (one SQLite file, two agent servers standing for two replicas) the other
replica answers `tasks/get` and relays a cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from fastmcp import Client
from mcp import MCPError
from mcp.client.session import ClientSession

from pallas_runtime.commands.chat.tasks import TaskHandle, TasksClient, TaskState, cancel, get, outcome, poll
from pallas_runtime.server.held import WATCH_SECONDS
from tests.integration.runtime.test_approvals import ops_mcp, script
from tests.support.agents import ServedAgent, agent_config, serve_agent
from tests.support.fake_llm import Call, Delay, FakeOpenAI, Hold, Text
from tests.support.mcp_servers import serve


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client[Any]]:
    """A fresh 2026-07-28 connection that speaks the tasks extension."""
    async with Client(url, extensions=[TasksClient()]) as client:
        yield client


async def start(client: Client[Any], message: str) -> TaskHandle:
    """send_message as a task: the handle, returned before the turn ends."""
    handle = await client.session.call_tool("send_message", {"message": message}, allow_claimed=True)
    assert isinstance(handle, TaskHandle), handle
    return handle


@contextlib.asynccontextmanager
async def agent(llm: FakeOpenAI, **fields: Any) -> AsyncIterator[ServedAgent]:
    async with serve_agent(agent_config(llm.base_url, **fields)) as served:
        yield served


async def test_a_turn_survives_its_clients_connection_cut_twice_and_the_result_comes_by_tasks_get(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(Delay(3.0, Text("the long answer")))
    async with agent(fake_openai) as served:
        async with connected(served.url) as client:
            handle = await start(client, "take your time")
        assert handle.status == "working"
        assert handle.ttl_ms == 3_600_000
        await asyncio.sleep(0.5)
        async with connected(served.url) as client:  # the first connection is gone: a new one
            assert (await get(client.session, handle.task_id)).status == "working"
        await asyncio.sleep(0.5)
        async with connected(served.url) as client:  # cut again; the third polls to the end
            final = await poll(client.session, handle.task_id)
    assert final.status == "completed"
    result = outcome(final)
    assert not result.is_error
    assert result.content[0].text == "the long answer"  # type: ignore[union-attr]
    assert len(fake_openai.completions) == 1  # the turn ran once: nothing was sent again


async def test_a_60_second_turn_survives_its_clients_connection_cut_twice(fake_openai: FakeOpenAI) -> None:
    """Issue 51's Done-when at full length: a 60 s model call outlives two dropped connections."""
    fake_openai.script(Delay(60.0, Text("a minute later")))
    # The model may take its minute: agent_config's provider times a model request out after 10 s.
    provider = {"name": "fake", "type": "openai", "baseURL": fake_openai.base_url, "maxRetries": 0,
                "timeoutSeconds": 90}  # fmt: skip
    async with agent(fake_openai, provider=provider) as served:
        async with connected(served.url) as client:
            handle = await start(client, "think for a minute")
        for _ in range(2):  # each connection polls a while mid-turn and is then cut
            await asyncio.sleep(15)
            async with connected(served.url) as client:
                state = await get(client.session, handle.task_id)
            assert state.status == "working", state
            assert len(fake_openai.completions) == 1  # the model is still on its one call
        async with connected(served.url) as client:
            final = await poll(client.session, handle.task_id)
    assert final.status == "completed"
    assert outcome(final).content[0].text == "a minute later"  # type: ignore[union-attr]
    assert len(fake_openai.completions) == 1  # the turn ran once, for its whole minute


async def test_a_fastmcp_client_with_the_extension_gets_the_answer_transparently(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(Delay(0.3, Text("polled for you")))
    async with agent(fake_openai) as served, connected(served.url) as client:
        result = await client.call_tool("send_message", {"message": "hi"})
    assert result.content[0].text == "polled for you"  # type: ignore[union-attr]


async def test_without_the_extension_and_for_a_legacy_client_the_call_is_answered_in_place(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(Text("direct"), Text("direct again"))
    async with agent(fake_openai) as served:
        async with Client(served.url) as modern:
            first = await modern.call_tool_mcp("send_message", {"message": "hi"})
        async with Client(served.url, mode="legacy", extensions=[TasksClient()]) as legacy:
            second = await legacy.call_tool_mcp("send_message", {"message": "hi"})
    assert [first.content[0].text, second.content[0].text] == ["direct", "direct again"]  # type: ignore[union-attr]


async def test_tasks_cancel_stops_the_turn(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, Text("never seen")))
    async with agent(fake_openai) as served, connected(served.url) as client:
        handle = await start(client, "wait")
        await fake_openai.holding_at_least(1)
        assert served.server.inflight.count == 1
        await cancel(client.session, handle.task_id)
        state = await get(client.session, handle.task_id)
        assert state.status == "cancelled"
        assert served.server.inflight.count == 0  # the turn itself stopped, not just its task
        release.set()


async def test_a_task_is_its_callers_alone_and_an_unknown_id_is_named(fake_openai: FakeOpenAI) -> None:
    async with agent(fake_openai) as served, connected(served.url) as client:
        with pytest.raises(MCPError, match="no task 'nope' of this caller"):
            await get(client.session, "nope")


async def test_a_finished_task_expires_after_its_ttl(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text("soon gone"))
    short = {"taskTtlSeconds": 1}
    async with agent(fake_openai, conversations=short) as served, connected(served.url) as client:
        handle = await start(client, "hi")
        assert (await poll(client.session, handle.task_id)).status == "completed"
        await asyncio.sleep(1.2)
        with pytest.raises(MCPError, match="expired after its TTL"):
            await get(client.session, handle.task_id)


async def test_with_a_database_store_another_replica_answers_tasks_get_and_relays_a_cancel(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.script(Delay(1.0, Text("from replica a")), Hold(release, Text("never seen")))
    store = {"type": "sqlite", "sqlitePath": str(tmp_path / "conversations.db")}
    async with agent(fake_openai, conversations=store) as a, agent(fake_openai, conversations=store) as b:
        async with connected(a.url) as on_a:
            first = await start(on_a, "first")
        async with connected(b.url) as on_b:
            final = await poll(on_b.session, first.task_id)
            assert outcome(final).content[0].text == "from replica a"  # type: ignore[union-attr]
        async with connected(a.url) as on_a:
            second = await start(on_a, "second")
        await fake_openai.holding_at_least(1)
        async with connected(b.url) as on_b:
            await cancel(on_b.session, second.task_id)
            await asyncio.sleep(WATCH_SECONDS * 2.5)
            assert (await get(on_b.session, second.task_id)).status == "cancelled"
        assert a.server.inflight.count == 0
        release.set()


async def answer_the_approval(
    session: ClientSession, task_id: str, ran: list[str]
) -> tuple[TaskState, list[str]]:
    """Follow task `task_id` to its approval question (its tool not run yet), approve, follow it to the end.

    The task's final state, and the questions asked.
    """
    asked: list[str] = []

    async def approve(params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"approve": True})

    state = await get(session, task_id)
    async with asyncio.timeout(60):
        while state.status == "working":
            await asyncio.sleep(0.05)
            state = await get(session, task_id)
    assert state.status == "input_required", state
    [request] = (state.input_requests or {}).values()
    assert request["method"] == "elicitation/create"
    assert ran == []  # held at the question
    return await poll(session, task_id, ask=approve), asked


async def test_a_tasks_approval_is_its_input_request_answered_by_tasks_update(
    fake_openai: FakeOpenAI,
) -> None:
    ran: list[str] = []
    fake_openai.default = script([Call("ops__delete_file", {"path": "/tmp/t"})])
    async with serve(ops_mcp(ran)) as ops:
        servers = [{"name": "ops", "url": ops.url, "requireApproval": {"tools": ["delete_*"]}}]
        async with (
            agent(fake_openai, servers=servers, instruction="worker") as served,
            connected(served.url) as client,
        ):
            handle = await start(client, "clean up")
            final, asked = await answer_the_approval(client.session, handle.task_id, ran)
    assert outcome(final).content[0].text == "worker got: deleted /tmp/t"  # type: ignore[union-attr]
    assert ran == ["delete_file /tmp/t"]
    assert len(asked) == 1


async def test_bad_arguments_end_the_task_with_the_error_an_ordinary_call_gets(
    fake_openai: FakeOpenAI,
) -> None:
    async with agent(fake_openai) as served, connected(served.url) as client:
        handle = await client.session.call_tool("send_message", {"message": 42}, allow_claimed=True)
        assert isinstance(handle, TaskHandle)
        final = await poll(client.session, handle.task_id)
    assert final.status == "completed"
    result = outcome(final)
    assert result.is_error
    assert "message" in result.content[0].text  # type: ignore[union-attr]
    assert fake_openai.completions == []
