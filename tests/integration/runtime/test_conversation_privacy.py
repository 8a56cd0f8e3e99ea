"""Conversations private by default, continuous per caller, apart per tenant (over real HTTP).

- Two anonymous clients: neither can list, read, continue or delete the other's conversation,
  and no output carries a session id.
- `caller` scope with OIDC: a client sending no conversation_id keeps its context across a
  reconnect and an agent restart on PostgreSQL; the history prompt with no arguments returns it
  from any session; another caller starts apart.
- The history shows tool activity.
- Two deployments on one database never meet; a re-created agent starts empty and its
  predecessor's conversations are deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError

from pallas_api.config import AgentConfig
from tests.support.agents import agent_config, serve_agent
from tests.support.conversations import send, user_texts
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer
from tests.support.postgres import Postgres

DSN_ENV = "PALLAS_CONVERSATIONS_DSN"

pytestmark = pytest.mark.timeout(240)


@contextlib.asynccontextmanager
async def client(url: str, token: str | None = None) -> AsyncIterator[tuple[Client[Any], list[str]]]:
    """An MCP client and the session ids the server gave it (read off the responses)."""
    seen: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in seen:
            seen.append(sid)

    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(**kwargs, event_hooks={"response": [remember]})

    transport = StreamableHttpTransport(url, httpx_client_factory=factory, auth=token)
    async with Client(transport, mode="legacy", timeout=60) as c:
        yield c, seen


async def listed(c: Client[Any]) -> set[str]:
    return {
        t["id"]
        for t in json.loads((await c.call_tool("list_conversations", {})).content[0].text)["conversations"]
    }


async def history_texts(c: Client[Any], agent: str, **arguments: str) -> list[str]:
    prompt = await c.get_prompt(f"{agent}_history", arguments)
    return [m.content.text for m in prompt.messages]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_two_anonymous_clients_cannot_see_or_reach_each_others_conversations(
    fake_openai: FakeOpenAI, tmp_path: Path, store: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.default = Text("noted")
    settings = {"type": store, **({"sqlitePath": str(tmp_path / "c.db")} if store == "sqlite" else {})}
    cfg = agent_config(fake_openai.base_url, name="keeper", conversations=settings)
    async with (
        serve_agent(cfg) as agent,
        client(agent.url) as (alice, alice_sessions),
        client(agent.url) as (bob, bob_sessions),
    ):
        _, alices = await send(alice, "my secret is 4711")
        await send(alice, "remember the alamo", "alice-named")
        (alice_sid,) = alice_sessions
        # Alice sees her own, under an id that carries nothing of her session id.
        assert alice_sid not in alices
        assert await listed(alice) == {alices, "alice-named"}
        assert await history_texts(alice, "keeper") == ["my secret is 4711", "noted"]

        # Bob: nothing listed, his own history is empty, and Alice's session cannot be named.
        assert await listed(bob) == set()
        caplog.clear()
        with (
            caplog.at_level(logging.DEBUG),
            pytest.raises(Exception, match="no stored conversation for this MCP session yet"),
        ):
            await history_texts(bob, "keeper")
        mistakes = [r for r in caplog.records if "keeper_history failed" in r.getMessage()]
        assert [r.levelno for r in mistakes] == [logging.INFO]
        assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
        for guess in (f"session:{alice_sid}", alice_sid, f"session-{alice_sid}"):
            with pytest.raises(Exception, match="no stored conversation"):
                await history_texts(bob, "keeper", conversation_id=guess)
            await send(bob, "what is the secret?", guess)
            assert user_texts(fake_openai.completions[-1].json) == ["what is the secret?"]
        # Not even an id Bob learnt elsewhere can be deleted from a session that never named it.
        with pytest.raises(ToolError, match="no stored conversation"):
            await bob.call_tool("delete_conversation", {"conversation_id": "alice-named"})
        _, bobs = await send(bob, "hello")
        assert bobs != alices
        guesses = {f"session:{alice_sid}", alice_sid, f"session-{alice_sid}"}
        assert await listed(bob) == {bobs, *guesses}
        (bob_sid,) = bob_sessions
        # What the server made up (Bob's own guesses aside) never carries a session id.
        made_up = [sorted(await listed(alice)), sorted(await listed(bob) - guesses), alices, bobs]
        every_output = json.dumps(made_up)
        assert alice_sid not in every_output
        assert bob_sid not in every_output
        assert all(alice_sid not in json.dumps(c.json) for c in fake_openai.completions)
        # Alice's own conversation is intact.
        assert await history_texts(alice, "keeper") == ["my secret is 4711", "noted"]


async def test_send_message_and_list_conversations_say_what_an_id_shares_without_auth(
    fake_openai: FakeOpenAI,
) -> None:
    cfg = agent_config(fake_openai.base_url, name="keeper")
    async with serve_agent(cfg) as agent, client(agent.url) as (c, _):
        tools = {t.name: t.description or "" for t in await c.list_tools()}
    assert "conversation_id is shared by everyone who knows it" in tools["send_message"]
    assert "only the conversations this MCP session started or named" in tools["list_conversations"]


def oidc_agent(llm: FakeOpenAI, issuer: Issuer, store: dict[str, Any]) -> AgentConfig:
    return agent_config(
        llm.base_url,
        name="keeper",
        conversations=store,
        auth={
            "mode": "oidc",
            "namespace": "agents",
            "resource": "http://keeper.agents.svc.cluster.local:8000/mcp",
            "oidc": {"issuer": issuer.url, "audience": AUDIENCE, "jwksRefreshSeconds": 0},
        },
    )


async def test_caller_scope_keeps_each_callers_context_across_reconnects_and_restarts(
    fake_openai: FakeOpenAI, postgres: Postgres
) -> None:
    fake_openai.default = Text("ok")
    environ = {DSN_ENV: postgres.dsn}
    async with oidc_issuer() as issuer:
        cfg = oidc_agent(fake_openai, issuer, {"type": "postgres", "dsnEnv": DSN_ENV})
        assert cfg.conversation_scope == "caller"  # the default once callers are identified
        alice, bob = issuer.token(sub="alice"), issuer.token(sub="bob")
        async with serve_agent(cfg, environ=environ) as agent:
            async with client(agent.url, alice) as (c, _):
                _, first = await send(c, "my name is Ada")
            async with client(agent.url, alice) as (c, _):  # a reconnect: a new MCP session
                _, again = await send(c, "what is my name?")
            assert first == again == "default"
            assert user_texts(fake_openai.completions[-1].json) == ["my name is Ada", "what is my name?"]
        # A restarted pod (a new process on the same database): the context is still there.
        async with serve_agent(cfg, environ=environ) as agent:
            async with client(agent.url, alice) as (c, _):
                assert await history_texts(c, "keeper") == ["my name is Ada", "ok", "what is my name?", "ok"]
                await send(c, "and now?")
                assert user_texts(fake_openai.completions[-1].json)[-1:] == ["and now?"]
                assert len(user_texts(fake_openai.completions[-1].json)) == 3
            async with client(agent.url, bob) as (c, _):
                with pytest.raises(Exception, match="no stored conversation for your default conversation"):
                    await history_texts(c, "keeper")
                await send(c, "who am I?")
                assert user_texts(fake_openai.completions[-1].json) == ["who am I?"]
                assert await listed(c) == {"default"}


def echo_mcp() -> FastMCP:
    mcp = FastMCP("echo")

    @mcp.tool(output_schema=None)
    async def echo(message: str) -> str:
        """Say it back."""
        return message

    return mcp


async def test_history_shows_tool_activity_in_a_readable_form(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        ToolCalls([Call("echo__echo", {"message": "x" * 2000})]),
        Text("The echo said it back."),
    )
    async with serve(echo_mcp()) as echo:
        cfg = agent_config(fake_openai.base_url, name="keeper", servers=[{"name": "echo", "url": echo.url}])
        texts = await _history_after_one_turn(cfg)
    assert texts[0] == "echo something long"
    call, result = texts[1], texts[2]
    assert call.startswith('[tool call] echo__echo {"message": "xxx')
    assert call.endswith("more characters)")
    assert len(call) < 400
    assert result.startswith("[tool result] echo__echo: ")
    assert len(result) < 600
    assert texts[3] == "The echo said it back."


async def _history_after_one_turn(cfg: AgentConfig) -> list[str]:
    async with serve_agent(cfg) as agent, client(agent.url) as (c, _):
        await send(c, "echo something long")
        return await history_texts(c, "keeper")


def tenant(llm: FakeOpenAI, path: Path, identity: str) -> AgentConfig:
    store = {"type": "sqlite", "sqlitePath": str(path), "agentIdentity": identity}
    return agent_config(llm.base_url, name="keeper", conversations=store)


async def test_two_deployments_on_one_database_stay_apart_and_a_recreated_agent_starts_empty(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Text("ok")
    db = tmp_path / "shared.db"
    one = tenant(fake_openai, db, "team-a/tenant-one/keeper/uid-1")
    two = tenant(fake_openai, db, "team-a/tenant-two/keeper/uid-2")
    async with serve_agent(one) as agent, client(agent.url) as (c, _):
        await send(c, "tenant one's plan", "plan")
    async with serve_agent(two) as agent, client(agent.url) as (c, _):
        with pytest.raises(Exception, match="no stored conversation"):
            await history_texts(c, "keeper", conversation_id="plan")
        await send(c, "tenant two's plan", "plan")
        assert user_texts(fake_openai.completions[-1].json) == ["tenant two's plan"]
    # tenant-one's keeper deleted and re-created: a new UID, an empty start, the old rows gone.
    recreated = tenant(fake_openai, db, "team-a/tenant-one/keeper/uid-3")
    async with serve_agent(recreated) as agent, client(agent.url) as (c, _):
        await send(c, "anything before?", "plan")
        assert user_texts(fake_openai.completions[-1].json) == ["anything before?"]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        agents = {row[0] for row in conn.execute("SELECT DISTINCT agent FROM pallas_conversations")}
    assert agents == {"team-a/tenant-two/keeper/uid-2", "team-a/tenant-one/keeper/uid-3"}


async def test_a_shared_single_user_agent_is_expressible_and_says_so_loudly(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.default = Text("ok")
    cfg = agent_config(fake_openai.base_url, name="desk", conversations={"scope": "caller"})
    with caplog.at_level(logging.WARNING, logger="pallas.server"):
        async with serve_agent(cfg) as agent:
            async with client(agent.url) as (first, _):
                tools = {t.name: t.description or "" for t in await first.list_tools()}
                _, kept_in = await send(first, "my name is Ada")
            async with client(agent.url) as (second, _):  # another client entirely
                await send(second, "what is my name?")
                assert await listed(second) == {"default"}
    assert kept_in == "default"
    assert user_texts(fake_openai.completions[-1].json) == ["my name is Ada", "what is my name?"]
    assert "every client continues the same conversation" in tools["send_message"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("every client continues one shared conversation" in w for w in warnings), warnings
