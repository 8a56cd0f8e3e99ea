"""Conversations over real HTTP: restarts, replicas, outages, cancellation, threads, delegation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError

from pallas_api.config import AgentConfig
from pallas_runtime.conversations.caller import ANONYMOUS
from pallas_runtime.conversations.factory import build_store
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.metrics import RuntimeMetrics
from tests.support.agents import agent_config, serve_agent
from tests.support.conversations import send, turns_on, until, user_texts
from tests.support.fake_llm import Call, Delay, FakeOpenAI, Hold, HttpError, Text, ToolCalls
from tests.support.postgres import Postgres, running_postgres

DSN_ENV = "PALLAS_CONVERSATIONS_DSN"

pytestmark = pytest.mark.timeout(240)

TTL, PAST_THE_TTL = 1, 1.2
"""A conversation's time to live (seconds, on the agent's monotonic clock), and a wait past it."""


def sqlite_store(path: Path) -> dict[str, Any]:
    return {"type": "sqlite", "sqlitePath": str(path)}


def postgres_store() -> dict[str, Any]:
    return {"type": "postgres", "dsnEnv": DSN_ENV}


def config(llm: FakeOpenAI, store: dict[str, Any], name: str = "keeper", **fields: Any) -> AgentConfig:
    return agent_config(llm.base_url, name=name, conversations=store, **fields)


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[Client[Any]]:
    async with Client(StreamableHttpTransport(url), mode="legacy", timeout=60) as c:
        yield c


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "conversations.db"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_restarted_agent_continues_the_conversation(
    fake_openai: FakeOpenAI, kind: str, sqlite_path: Path, postgres: Postgres
) -> None:
    store = sqlite_store(sqlite_path) if kind == "sqlite" else postgres_store()
    environ = {DSN_ENV: postgres.dsn}
    conversation = f"restart-{secrets.token_hex(4)}"
    cfg = config(fake_openai, store)
    async with serve_agent(cfg, environ=environ) as agent, client(agent.url) as c:
        _, stored_in = await send(c, "my name is Ada", conversation)
    assert stored_in == conversation
    # A new process (a rolled pod) on the same store: the next turn has the context.
    async with serve_agent(cfg, environ=environ) as agent, client(agent.url) as c:
        await send(c, "what is my name?", conversation)
    assert user_texts(fake_openai.completions[-1].json) == ["my name is Ada", "what is my name?"]


async def test_two_agent_processes_on_one_database_keep_one_ordered_conversation(
    fake_openai: FakeOpenAI, postgres: Postgres
) -> None:
    cfg = config(fake_openai, postgres_store())
    fake_openai.default = Delay(0.05, Text("noted"))
    conversation = f"replicas-{secrets.token_hex(4)}"
    environ = {DSN_ENV: postgres.dsn}
    async with (
        serve_agent(cfg, environ=environ) as one,
        serve_agent(cfg, environ=environ) as two,
        client(one.url) as a,
        client(two.url) as b,
    ):
        await asyncio.gather(*(send(a if n % 2 else b, f"turn {n}", conversation) for n in range(6)))
        prompt = await a.get_prompt("keeper_history", {"conversation_id": conversation})
    seen = [user_texts(r.json) for r in fake_openai.completions]
    # Each turn saw every turn stored before it: 1, 2, … 6 user messages, never interleaved.
    assert sorted(len(s) for s in seen) == [1, 2, 3, 4, 5, 6]
    longest = max(seen, key=len)
    assert all(s == longest[: len(s)] for s in seen)
    users = [m.content.text for m in prompt.messages if m.role == "user"]
    assert users == longest


async def test_a_database_outage_fails_turns_clearly_degrades_health_and_recovers(
    fake_openai: FakeOpenAI,
) -> None:
    with running_postgres() as database:
        cfg = config(fake_openai, postgres_store())
        conversation = f"outage-{secrets.token_hex(4)}"
        async with serve_agent(cfg, environ={DSN_ENV: database.dsn}) as agent, client(agent.url) as c:
            await send(c, "before", conversation)
            database.stop()
            try:
                with pytest.raises(
                    ToolError, match=r"the conversation was not kept: postgres conversation store"
                ):
                    await send(c, "during", conversation)
                health = json.loads((await c.call_tool("get_health", {})).content[0].text)
                assert health["status"] == "degraded"
                assert "Conversations: postgres conversation store unavailable" in health["message"]
                assert "s3cret" not in json.dumps(health)
            finally:
                database.start()
            await send(c, "after", conversation)
            health = json.loads((await c.call_tool("get_health", {})).content[0].text)
            assert health["status"] == "ok", health
        assert user_texts(fake_openai.completions[-1].json) == ["before", "after"]


async def test_a_cancelled_send_stops_its_llm_call_and_stores_nothing(
    fake_openai: FakeOpenAI, sqlite_path: Path
) -> None:
    fake_openai.script(Hold(asyncio.Event()))
    async with serve_agent(config(fake_openai, sqlite_store(sqlite_path))) as agent, client(agent.url) as c:
        call = asyncio.create_task(send(c, "never mind", "cancelled"))
        await fake_openai.held.wait()
        call.cancel()  # the client sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            if fake_openai.abandoned:
                break
            await asyncio.sleep(0.05)
        assert fake_openai.abandoned == 1, "the agent's LLM request was not stopped"
        threads = json.loads((await c.call_tool("list_conversations", {})).content[0].text)
        assert threads == {"conversations": []}
        await send(c, "hello again", "cancelled")
    assert user_texts(fake_openai.completions[-1].json) == ["hello again"]


async def test_threads_are_listed_by_the_session_that_named_them_resumed_by_id_and_deleted(
    fake_openai: FakeOpenAI, sqlite_path: Path
) -> None:
    async with serve_agent(config(fake_openai, sqlite_store(sqlite_path))) as agent:
        async with client(agent.url) as first:
            await send(first, "Tell me about Plato's Republic", "plato")
            _, session_conversation = await send(first, "a turn without an id")
            assert session_conversation.startswith("session-")
            listing = json.loads((await first.call_tool("list_conversations", {})).content[0].text)
            assert {t["id"] for t in listing["conversations"]} == {"plato", session_conversation}
        async with client(agent.url) as later:  # a new MCP session: a reconnect, another tab
            # Anonymous: nothing of another session is listed, not even by the same client.
            listing = json.loads((await later.call_tool("list_conversations", {})).content[0].text)
            assert listing["conversations"] == []
            # An explicit id is a name anyone who knows it may use (docs/api.md §3).
            prompt = await later.get_prompt("keeper_history", {"conversation_id": "plato"})
            assert [m.content.text for m in prompt.messages] == ["Tell me about Plato's Republic", "ok"]
            listing = json.loads((await later.call_tool("list_conversations", {})).content[0].text)
            by_id = {t["id"]: t for t in listing["conversations"]}
            assert set(by_id) == {"plato"}
            assert by_id["plato"]["title"] == "Tell me about Plato's Republic"
            assert by_id["plato"]["messageCount"] == 2
            await later.call_tool("delete_conversation", {"conversation_id": "plato"})
            with pytest.raises(ToolError, match="no stored conversation for conversation_id 'plato'"):
                await later.call_tool("delete_conversation", {"conversation_id": "plato"})
            with pytest.raises(Exception, match="no stored conversation"):
                await later.get_prompt("keeper_history", {"conversation_id": "plato"})


async def test_a_bad_conversation_id_is_a_clear_tool_error(fake_openai: FakeOpenAI) -> None:
    async with serve_agent(config(fake_openai, {"type": "memory"})) as agent, client(agent.url) as c:
        with pytest.raises(ToolError, match="conversation_id is 300 characters long; the limit is 256"):
            await send(c, "hi", "x" * 300)
    assert fake_openai.completions == []


async def test_two_callers_through_an_orchestrator_never_share_the_peers_context(
    fake_openai: FakeOpenAI,
) -> None:
    """Both callers' delegations travel the orchestrator's one session to the worker."""

    def step(request: dict[str, Any]) -> Any:
        system, last = request["messages"][0]["content"], request["messages"][-1]
        if system == "worker":
            return Text(f"worker saw {len(user_texts(request))} questions")
        if last["role"] == "tool":
            return Text("relayed")
        return ToolCalls([Call("worker__send_message", {"message": f"relay: {last['content']}"})])

    fake_openai.default = step
    memory = {"type": "memory"}
    async with serve_agent(config(fake_openai, memory, name="worker", instruction="worker")) as worker:
        boss_cfg = config(
            fake_openai,
            memory,
            name="boss",
            instruction="boss",
            agents=[{"name": "worker", "url": worker.url}],
        )
        async with serve_agent(boss_cfg) as boss, client(boss.url) as alice, client(boss.url) as bob:
            for n in range(3):
                await asyncio.gather(send(alice, f"ALICE-{n}"), send(bob, f"BOB-{n}"))
    worker_requests = [
        r.json for r in fake_openai.completions if r.json["messages"][0]["content"] == "worker"
    ]
    assert len(worker_requests) == 6
    for request in worker_requests:
        texts = " ".join(user_texts(request))
        assert ("ALICE" in texts) != ("BOB" in texts), f"one caller's text reached the other's: {texts}"
    # Each caller's peer conversation kept its own context: the third question saw three.
    assert max(len(user_texts(r)) for r in worker_requests) == 3


async def test_a_failed_first_turn_never_lets_two_turns_run_at_once_or_loses_one(
    fake_openai: FakeOpenAI, sqlite_path: Path
) -> None:
    """Turn A fails at the model while B waits behind it; C comes while B is at the model.

    Each step waits for the one before: the fake LLM holds A and B until the agent's store shows
    the next turn waiting for the conversation.
    """
    cfg = agent_config(fake_openai.base_url, name="keeper", conversations=sqlite_store(sqlite_path))
    fail_a, answer_b = asyncio.Event(), asyncio.Event()
    fake_openai.script(
        Hold(fail_a, HttpError(400, "the first turn fails")),
        Hold(answer_b, Text("answer B")),
        Text("answer C"),
    )
    store = build_store(cfg, {})
    race = ConversationKey(cfg.identity, ANONYMOUS, "race")
    async with (
        serve_agent(cfg, store=store) as agent,
        client(agent.url) as a,
        client(agent.url) as b,
        client(agent.url) as c,
    ):
        turn_a = asyncio.create_task(send(a, "question A", "race"))
        await fake_openai.holding_at_least(1)
        turn_b = asyncio.create_task(send(b, "question B", "race"))
        await until(lambda: turns_on(store, race) == 2, "B waiting behind A")
        fail_a.set()
        with pytest.raises(ToolError, match="language model call failed"):
            await turn_a
        await fake_openai.holding_at_least(1)  # B at the model
        turn_c = asyncio.create_task(send(c, "question C", "race"))
        await until(lambda: turns_on(store, race) == 2, "C waiting behind B")
        answer_b.set()
        (text_b, _), (text_c, _) = await asyncio.gather(turn_b, turn_c)
        prompt = await a.get_prompt("keeper_history", {"conversation_id": "race"})
    assert (text_b, text_c) == ("answer B", "answer C")
    # B ran after A was kept as failed, then C saw B's finished turn: nothing lost, nothing interleaved.
    texts = [m.content.text for m in prompt.messages]
    assert texts[0] == "question A"
    assert texts[1].startswith("[turn failed] LLM_ERROR: the language model call failed: ")
    assert texts[2:] == ["question B", "answer B", "question C", "answer C"]
    assert user_texts(fake_openai.completions[-1].json) == ["question A", "question B", "question C"]


async def test_a_failed_turn_is_kept_in_its_conversation_shown_in_history_and_never_sent(
    fake_openai: FakeOpenAI, sqlite_path: Path
) -> None:
    fake_openai.script(HttpError(400, "the model refused the request"), Text("Plato wrote it."))
    async with serve_agent(config(fake_openai, sqlite_store(sqlite_path))) as agent, client(agent.url) as c:
        with pytest.raises(ToolError, match="language model call failed") as failed:
            await send(c, "Who wrote The Republic?", "kept")
        failed_history = await c.get_prompt("keeper_history", {"conversation_id": "kept"})
        answer, _ = await send(c, "Who wrote The Republic, please?", "kept")
        history = await c.get_prompt("keeper_history", {"conversation_id": "kept"})
    failure = f"[turn failed] LLM_ERROR: {failed.value}"
    assert [(m.role, m.content.text) for m in failed_history.messages] == [
        ("user", "Who wrote The Republic?"),
        ("assistant", failure),
    ]
    assert answer == "Plato wrote it."
    assert [m.content.text for m in history.messages] == [
        "Who wrote The Republic?",
        failure,
        "Who wrote The Republic, please?",
        "Plato wrote it.",
    ]
    # The next turn's model sees the question left unanswered, never the failure record.
    sent = fake_openai.completions[-1].json["messages"]
    assert user_texts(fake_openai.completions[-1].json) == [
        "Who wrote The Republic?",
        "Who wrote The Republic, please?",
    ]
    assert not [m for m in sent if "turn failed" in json.dumps(m)]


async def test_a_failed_send_is_one_log_line_with_the_agent_and_the_reason(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve_agent(config(fake_openai, {"type": "memory"})) as agent, client(agent.url) as c:
        with pytest.raises(ToolError):
            await send(c, "hi", "x" * 300)
    failures = [r for r in caplog.records if r.getMessage().startswith("send_message failed")]
    assert [(r.levelname, getattr(r, "agent", None)) for r in failures] == [("INFO", "keeper")]
    assert "conversation_id is 300 characters long" in failures[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_the_active_conversations_gauge_follows_expiry_failed_turns_and_deletes(
    fake_openai: FakeOpenAI,
) -> None:
    metrics = RuntimeMetrics(process_collectors=False)

    def active() -> float | None:
        return metrics.registry.get_sample_value("pallas_active_conversations", {"agent": "keeper"})

    cfg = config(fake_openai, {"type": "memory", "ttlSeconds": TTL})
    fake_openai.script(Text("one"), HttpError(400, "no"), Text("two"), Text("three"))
    async with serve_agent(cfg, metrics=metrics) as agent, client(agent.url) as c:
        await send(c, "first", "one")
        assert active() == 1
        await asyncio.sleep(PAST_THE_TTL)  # "one" expires
        with pytest.raises(ToolError, match="language model call failed"):
            await send(c, "fails", "failed")
        assert active() == 1, "an expired conversation still counted, or the failed turn not kept"
        await send(c, "second", "two")
        await send(c, "third", "three")
        assert active() == 3
        await c.call_tool("delete_conversation", {"conversation_id": "two"})
        assert active() == 2


async def test_three_replicas_of_two_agents_stay_within_their_connection_budget_on_a_small_server(
    fake_openai: FakeOpenAI,
) -> None:
    """Six agent processes (in-process replicas) on a server with 14 connections for them.

    Each may open `maxConnections: 2`, so 12 at most; before one pool per process, each opened
    an engine's, an autocommit engine's and asyncpg's own (3 at least, up to 60), and turns
    failed with "remaining connection slots are reserved".
    """
    budget, replicas, clients, turns = 2, 3, 6, 10
    fake_openai.default = Delay(0.01, Text("noted"))
    settings = {"max_connections": "16", "superuser_reserved_connections": "2"}
    with running_postgres(settings) as database:
        database.create_role("agent", "agent-Passw0rd")
        environ = {DSN_ENV: database.dsn_of("agent", "agent-Passw0rd")}
        store = {**postgres_store(), "maxConnections": budget}
        peak = 0
        watching = True

        async def watch() -> None:  # as the superuser, in a slot the agents cannot take
            nonlocal peak
            connection = await asyncpg.connect(database.dsn)
            try:
                while watching:
                    count = await connection.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'agent'"
                    )
                    peak = max(peak, count)
                    await asyncio.sleep(0.005)
            finally:
                await connection.close()

        async with contextlib.AsyncExitStack() as stack:
            agents = {
                name: [
                    await stack.enter_async_context(
                        serve_agent(config(fake_openai, store, name), environ=environ)
                    )
                    for _ in range(replicas)
                ]
                for name in ("alpha", "beta")
            }
            watcher = asyncio.create_task(watch())

            async def conversation(n: int) -> list[str]:
                name = ("alpha", "beta")[n % 2]
                sessions = [await stack.enter_async_context(client(a.url)) for a in agents[name]]
                for t in range(turns):  # each turn on the next replica: they hand the conversation on
                    await send(sessions[(n + t) % replicas], f"c{n} turn {t}", f"budget-{n}")
                prompt = await sessions[0].get_prompt(f"{name}_history", {"conversation_id": f"budget-{n}"})
                return [m.content.text for m in prompt.messages if m.role == "user"]

            try:
                histories = await asyncio.gather(*(conversation(n) for n in range(clients)))
            finally:
                watching = False
                await watcher
        log = database.log.read_text()
    assert histories == [[f"c{n} turn {t}" for t in range(turns)] for n in range(clients)]
    assert "too many clients" not in log
    assert "connection slots are reserved" not in log
    assert 0 < peak <= 2 * replicas * budget, f"{peak} connections for a budget of {2 * replicas * budget}"
