"""Budgets' spend on a real PostgreSQL server: it survives a restart, replicas never lose any."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime

import pytest
from fastmcp import Client

from pallas_runtime.conversations.sql import SqlStore, engine_url
from pallas_runtime.spending.ledger import Bucket
from pallas_runtime.spending.sql_ledger import SqlLedger
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, FakeUsage, Text
from tests.support.postgres import PASSWORD, Postgres

pytestmark = pytest.mark.timeout(300)


async def test_budgets_survive_an_agent_restart_on_postgres(
    fake_openai: FakeOpenAI, postgres: Postgres
) -> None:
    fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
    config = agent_config(
        fake_openai.base_url,
        name=f"keeper-{secrets.token_hex(4)}",
        conversations={"type": "postgres", "dsnEnv": "PALLAS_TEST_DSN"},
        budgets={"perCaller": {"window": "day", "tokens": 20}},
    )
    environ = {"PALLAS_TEST_DSN": postgres.dsn}
    async with serve_agent(config, environ=environ) as agent, Client(agent.url) as client:
        assert not (await client.call_tool_mcp("send_message", {"message": "one"})).is_error
        assert not (await client.call_tool_mcp("send_message", {"message": "two"})).is_error
    asked = len(fake_openai.completions)
    async with serve_agent(config, environ=environ) as agent, Client(agent.url) as client:
        third = await client.call_tool_mcp("send_message", {"message": "three"})
    assert third.structured_content["error"]["code"] == "BUDGET_EXCEEDED"
    assert third.content[0].text.startswith(
        "budget exceeded: caller anonymous spent 30 tokens of its 20 per day"
    )
    assert len(fake_openai.completions) == asked


async def test_replicas_charging_at_once_lose_no_spend(postgres: Postgres) -> None:
    """Two processes' stores on one database, 100 concurrent charges: the totals are exact."""
    url = engine_url("postgres", postgres.dsn)
    replicas = [
        SqlStore("postgres", url, max_messages=200, secret=PASSWORD, identity="ns/d/a") for _ in range(2)
    ]
    bucket = Bucket(f"ns/d/a-{secrets.token_hex(4)}", "sub:alice", "day", datetime(2026, 11, 28, tzinfo=UTC))
    other = Bucket(bucket.agent, "*", "day", bucket.start)
    try:
        for store in replicas:
            await store.start()
        ledgers = [SqlLedger(store) for store in replicas]
        await asyncio.gather(*(ledgers[i % 2].add([bucket, other], 7, 3) for i in range(100)))
        assert await ledgers[0].read([bucket, other]) == await ledgers[1].read([bucket, other])
        (spent, agent_spent) = await ledgers[1].read([bucket, other])
        assert (spent.tokens, spent.micros) == (700, 300)
        assert (agent_spent.tokens, agent_spent.micros) == (700, 300)
        # Another agent identity sharing the database (another deployment, namespace or tenant)
        # starts from nothing.
        (stranger,) = await ledgers[0].read([Bucket("ns2/d/a", "sub:alice", "day", bucket.start)])
        assert (stranger.tokens, stranger.micros) == (0, 0)
    finally:
        for store in replicas:
            await store.aclose()
