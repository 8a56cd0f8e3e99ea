"""`create_conversation` through a real MCP client and the runtime's HTTP server (seeds O9, O7).

An explicit create returns the new conversation's id and takes session metadata: a provider or
model of those the agent offers (checked as `params.model` is, refused with the list when not),
kept in the store with the conversation and used by its later turns, against the scripted fake
LLM servers of two providers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.config import AgentConfig, parse_config
from pallas_api.names import CONVERSATION_META
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import FakeAnthropic, FakeOpenAI, Text
from tests.support.mcp_servers import serve_app
from tests.support.postgres import Postgres

CLAUDE_KEY = "sk-ant-test-create-5c1d"
KEY_ENV = "PALLAS_PROVIDER_CLAUDE_API_KEY"


def config(llm: FakeOpenAI, claude: FakeAnthropic, **extra: Any) -> AgentConfig:
    """An agent on an OpenAI-compatible provider offering another of its models and a Claude one."""
    other = {
        "name": "claude",
        "type": "anthropic",
        "baseURL": claude.base_url,
        "apiKeyEnv": KEY_ENV,
        "maxRetries": 0,
    }
    return parse_config(
        {
            "name": "harper",
            "instruction": "You are Harper.",
            "model": "fake-small",
            "provider": {"name": "llm", "type": "openai", "baseURL": llm.base_url, "maxRetries": 0},
            "models": [{"model": "fake-big"}, {"model": "claude-fake", "provider": other}],
            **extra,
        }
    )


def session_client(url: str) -> Client[Any]:
    """A client of the session-keeping revision: an anonymous session lists what it created."""
    return Client(StreamableHttpTransport(url), mode="legacy", timeout=60)


def served(cfg: AgentConfig, environ: dict[str, str] | None = None) -> Any:
    return serve_app(agent_app(build_server(cfg, environ={KEY_ENV: CLAUDE_KEY, **(environ or {})})))


async def create(c: Client[Any], **metadata: str) -> Any:
    return await c.call_tool_mcp("create_conversation", {"metadata": metadata} if metadata else {})


async def send(c: Client[Any], message: str, conversation_id: str, **params: str) -> str:
    arguments: dict[str, Any] = {"message": message, "conversation_id": conversation_id}
    if params:
        arguments["params"] = params
    result = await c.call_tool_mcp("send_message", arguments)
    assert not result.is_error, result.content
    return str(result.content[0].text)


async def test_a_created_conversation_runs_on_the_provider_it_was_created_with() -> None:
    async with (
        FakeOpenAI(models=("fake-small", "fake-big")) as llm,
        FakeAnthropic(api_key=CLAUDE_KEY) as claude,
    ):
        claude.script(Text("claude one"), Text("claude two"))
        llm.script(Text("big for once"), Text("small default"), Text("big by model"))
        async with served(config(llm, claude)) as running, session_client(running.url) as c:
            made = await create(c, provider="claude", title="with claude")
            assert not made.is_error, made.content
            answer = json.loads(made.content[0].text)
            conversation = answer["conversationId"]
            assert answer == {
                "conversationId": conversation,
                "provider": "claude",
                "model": "claude-fake",
                "status": "active",
            }
            assert made.meta[CONVERSATION_META] == conversation
            # Listed (with its title) before its first message, in this session.
            listed = await c.call_tool_mcp("list_conversations", {})
            (entry,) = json.loads(listed.content[0].text)["conversations"]
            assert (entry["id"], entry["title"], entry["messageCount"]) == (conversation, "with claude", 0)

            assert await send(c, "first", conversation) == "claude one"
            assert await send(c, "second", conversation) == "claude two"
            # The call's own params.model still wins for its turn.
            assert await send(c, "third", conversation, model="fake-big") == "big for once"
            # A conversation without settings runs on the agent's model; a model alone picks it.
            plain = json.loads((await create(c)).content[0].text)
            assert (plain["provider"], plain["model"]) == ("llm", "fake-small")
            assert await send(c, "plain", plain["conversationId"]) == "small default"
            big = json.loads((await create(c, model="fake-big")).content[0].text)
            assert await send(c, "big", big["conversationId"]) == "big by model"
    assert [r.json["model"] for r in claude.completions] == ["claude-fake", "claude-fake"]
    second = claude.completions[1].json["messages"]
    # The second turn's request carries the first: the conversation's history, on Claude.
    first_user = next(m["content"] for m in second if m["role"] == "user")
    assert first_user in ("first", [{"type": "text", "text": "first"}])
    assert [r.json["model"] for r in llm.completions] == ["fake-big", "fake-small", "fake-big"]


async def test_an_undeclared_provider_or_model_is_refused_with_what_is_offered() -> None:
    async with (
        FakeOpenAI(models=("fake-small",)) as llm,
        FakeAnthropic(api_key=CLAUDE_KEY) as claude,
        served(config(llm, claude)) as running,
        session_client(running.url) as c,
    ):
        provider = await create(c, provider="gemini")
        model = await create(c, model="gpt-9")
        mismatch = await create(c, provider="claude", model="fake-big")
        bare = await create(c, provider="claude", model="claude-fake")
        unknown = await c.call_tool_mcp("create_conversation", {"metadata": {"providerId": "claude"}})
        listed = await c.call_tool_mcp("list_conversations", {})
    for refused in (provider, model, mismatch):
        assert refused.is_error
        assert refused.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    assert provider.content[0].text == (
        "metadata.provider 'gemini' is not a provider this agent offers (offered: llm, claude)"
    )
    assert model.content[0].text == (
        "metadata.model 'gpt-9' is not a model this agent offers "
        "(offered: fake-small, fake-big, claude.claude-fake)"
    )
    assert mismatch.content[0].text.startswith(
        "metadata.model 'fake-big' is not a model of provider 'claude'"
    )
    assert not bare.is_error  # a model named by its id on the provider given
    assert json.loads(bare.content[0].text)["model"] == "claude-fake"
    assert unknown.is_error  # a misspelt key is not ignored
    assert "providerId" in unknown.content[0].text
    # Nothing refused was kept.
    assert len(json.loads(listed.content[0].text)["conversations"]) == 1


async def test_an_agent_that_lets_no_call_choose_its_model_refuses_a_model_at_create() -> None:
    async with FakeOpenAI(models=("fake-small",)) as llm, FakeAnthropic(api_key=CLAUDE_KEY) as claude:
        cfg = config(llm, claude, callParams={"allow": ["temperature"]})
        async with served(cfg) as running, Client(running.url) as c:
            refused = await create(c, provider="claude")
            allowed = await create(c)  # nothing chosen: nothing to refuse
    assert refused.is_error
    assert refused.content[0].text.startswith("metadata.model: this agent does not let a call set it")
    assert not allowed.is_error


async def kept_across_a_restart(store: dict[str, Any], environ: dict[str, str]) -> None:
    async with FakeOpenAI(models=("fake-small",)) as llm, FakeAnthropic(api_key=CLAUDE_KEY) as claude:
        claude.script(Text("still claude"))
        cfg = config(llm, claude, conversations=store)
        async with served(cfg, environ) as running, Client(running.url) as c:
            conversation = json.loads((await create(c, provider="claude")).content[0].text)["conversationId"]
        # A new process (another replica, or after a restart) knows the choice from the store.
        async with served(cfg, environ) as running, Client(running.url) as c:
            assert await send(c, "hello again", conversation) == "still claude"
    assert llm.completions == []


async def test_the_choice_is_kept_in_a_sqlite_store(tmp_path: Path) -> None:
    await kept_across_a_restart({"type": "sqlite", "sqlitePath": str(tmp_path / "c.db")}, {})


async def test_the_choice_is_kept_in_a_postgres_store(postgres: Postgres) -> None:
    await kept_across_a_restart(
        {"type": "postgres", "dsnEnv": "PALLAS_CONVERSATIONS_DSN", "agentIdentity": "ns/dep/harper/create"},
        {"PALLAS_CONVERSATIONS_DSN": postgres.dsn},
    )


async def test_a_conversation_whose_model_the_agent_no_longer_offers_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    store = {"type": "sqlite", "sqlitePath": str(tmp_path / "c.db")}
    async with FakeOpenAI(models=("fake-small",)) as llm, FakeAnthropic(api_key=CLAUDE_KEY) as claude:
        async with served(config(llm, claude, conversations=store)) as running, Client(running.url) as c:
            conversation = json.loads((await create(c, provider="claude")).content[0].text)["conversationId"]
        # The deployment dropped the Claude model since.
        narrower = config(llm, claude, conversations=store).model_copy(update={"models": []})
        async with served(narrower) as running, Client(running.url) as c:
            refused = await c.call_tool_mcp(
                "send_message", {"message": "hi", "conversation_id": conversation}
            )
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "INVALID_ARGUMENTS"
    assert refused.content[0].text == (
        f"conversation {conversation!r} was created with model 'claude.claude-fake': params.model "
        "'claude.claude-fake' is not a model this agent offers (offered: fake-small)"
    )
    assert (llm.completions, claude.completions) == ([], [])
