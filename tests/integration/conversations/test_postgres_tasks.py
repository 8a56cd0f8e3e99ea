"""MCP tasks on a real PostgreSQL server: another replica answers `tasks/get` and relays a cancel."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from fastmcp import Client

from pallas_runtime.commands.chat.tasks import TaskHandle, TasksClient, cancel, get, outcome, poll
from pallas_runtime.server.held import WATCH_SECONDS
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Delay, FakeOpenAI, Hold, Text
from tests.support.postgres import Postgres

pytestmark = pytest.mark.timeout(300)


async def test_a_task_started_on_one_replica_is_followed_and_cancelled_on_another(
    fake_openai: FakeOpenAI, postgres: Postgres
) -> None:
    release = asyncio.Event()
    fake_openai.script(Delay(0.5, Text("kept in postgres")), Hold(release, Text("never seen")))
    config = agent_config(
        fake_openai.base_url,
        name=f"tasks-{secrets.token_hex(4)}",
        conversations={"type": "postgres", "dsnEnv": "PALLAS_TEST_DSN"},
    )
    environ = {"PALLAS_TEST_DSN": postgres.dsn}
    async with serve_agent(config, environ=environ) as a, serve_agent(config, environ=environ) as b:
        async with Client(a.url, extensions=[TasksClient()]) as on_a:
            first = await on_a.session.call_tool("send_message", {"message": "one"}, allow_claimed=True)
        assert isinstance(first, TaskHandle)
        async with Client(b.url, extensions=[TasksClient()]) as on_b:  # tasks/* name the extension
            final = await poll(on_b.session, first.task_id)
            assert outcome(final).content[0].text == "kept in postgres"  # type: ignore[union-attr]
        async with Client(a.url, extensions=[TasksClient()]) as on_a:
            second = await on_a.session.call_tool("send_message", {"message": "two"}, allow_claimed=True)
        assert isinstance(second, TaskHandle)
        async with Client(b.url, extensions=[TasksClient()]) as on_b:  # tasks/* name the extension
            await fake_openai.holding_at_least(1)
            await cancel(on_b.session, second.task_id)
            await asyncio.sleep(WATCH_SECONDS * 2.5)
            assert (await get(on_b.session, second.task_id)).status == "cancelled"
        assert a.server.inflight.count == 0
        release.set()
