"""Budgets between real agents over HTTP, and their spend surviving a restart on SQLite.

Agents served over real HTTP call each other through MCP with fastmcp's client, thinking with one
scripted FakeOpenAI (the real Chat Completions wire, usage chunks included) whose replies depend
on the agent's instruction. The root caller's budget travels in the delegation `_meta`: a
sub-agent refuses work beyond what the root caller has left, and reports what it spent, which
the orchestrator charges to its caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.config import parse_config
from pallas_api.health import utc_timestamp
from pallas_api.spending import window_end, window_start
from pallas_runtime.server import AgentServer, agent_app, build_server
from pallas_runtime.spending.ledger import Bucket
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, FakeUsage, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, bound_socket, serve_app
from tests.support.oidc import AUDIENCE, oidc_issuer


@contextlib.asynccontextmanager
async def agents(
    llm: FakeOpenAI, specs: dict[str, dict[str, Any]]
) -> AsyncIterator[dict[str, tuple[RunningServer, AgentServer]]]:
    """Serve one agent per spec (name → extra config fields; `agents` lists peer names)."""
    sockets = {name: bound_socket() for name in specs}
    urls = {name: f"http://127.0.0.1:{s.getsockname()[1]}/mcp" for name, s in sockets.items()}
    async with contextlib.AsyncExitStack() as stack:
        served = {}
        for name, fields in specs.items():
            peers = [{"name": peer, "url": urls[peer]} for peer in fields.get("agents", [])]
            if "auth" in fields:  # oidc names the agent's own URL as the resource callers ask for
                fields = {**fields, "auth": {**fields["auth"], "resource": urls[name]}}
            config = parse_config(
                {
                    "name": name,
                    "model": llm.models[0],
                    "instruction": name,
                    "provider": {"name": "llm", "type": "openai", "baseURL": llm.base_url, "maxRetries": 0},
                    **{k: v for k, v in fields.items() if k != "agents"},
                    "agents": peers,
                }
            )
            server = build_server(config, environ={})
            running = await stack.enter_async_context(serve_app(agent_app(server), sock=sockets[name]))
            served[name] = (running, server)
        yield served


def next_midnight() -> str:
    return utc_timestamp(window_end("day", window_start("day", datetime.now(UTC))))


def delegation(request: dict[str, Any]) -> Any:
    """alpha asks beta once (40 tokens); beta keeps calling a missing tool, 50 tokens a call."""
    agent = request["messages"][0]["content"]
    last = request["messages"][-1]
    if agent == "alpha":
        if last["role"] == "user":
            return ToolCalls([Call("beta__send_message", {"message": "dig"})], usage=FakeUsage(30, 10))
        return Text(f"alpha got: {last['content']}")
    return ToolCalls([Call("nothing__here")], usage=FakeUsage(40, 10))


async def test_a_two_level_delegation_exhausts_the_root_callers_budget_at_the_sub_agent(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = delegation
    specs: dict[str, dict[str, Any]] = {
        "alpha": {"agents": ["beta"], "budgets": {"perCaller": {"window": "day", "tokens": 100}}},
        "beta": {"budgets": {"perCaller": {"window": "day", "tokens": 10_000}}},
    }
    async with agents(fake_openai, specs) as served, Client(served["alpha"][0].url) as client:
        result = await client.call_tool_mcp("send_message", {"message": "start"})
        again = await client.call_tool_mcp("send_message", {"message": "more"})
        alpha, beta = served["alpha"][1], served["beta"][1]
        (beta_spent,) = await beta.budgets.ledger.read(
            [Bucket("beta", "anonymous", "day", window_start("day", datetime.now(UTC)))]
        )
    # alpha spent 40 and passed on 60; beta spent 50, then 50 more (it started under 60), and
    # refused its third call. alpha charged beta's 100 to its caller: 140 of 100, so its own next
    # call, and the caller's next turn, are refused.
    assert result.is_error
    assert result.structured_content["error"]["code"] == "BUDGET_EXCEEDED"
    spent = "budget exceeded: caller anonymous spent 140 tokens of its 100 per day"
    assert result.content[0].text == f"{spent}; it resets at {next_midnight()}"
    assert again.structured_content["error"]["code"] == "BUDGET_EXCEEDED"
    beta_calls = [c for c in fake_openai.completions if c.json["messages"][0]["content"] == "beta"]
    alpha_calls = [c for c in fake_openai.completions if c.json["messages"][0]["content"] == "alpha"]
    assert (len(alpha_calls), len(beta_calls)) == (1, 2)
    assert beta.metrics.budget_exceeded_total.labels("beta", "chain")._value.get() == 1
    assert alpha.metrics.budget_exceeded_total.labels("alpha", "caller")._value.get() == 2
    # beta charged its spend in its own store to the caller its request authenticated as.
    assert (beta_spent.tokens, beta_spent.micros) == (100, 0)


async def test_a_direct_caller_forging_the_chain_budget_cannot_raise_its_own(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
    specs: dict[str, dict[str, Any]] = {"beta": {"budgets": {"perCaller": {"window": "hour", "tokens": 20}}}}
    forged = {"pallas.dev/budget": {"rootCaller": "sub:somebody-else", "tokens": 10**9}}
    async with agents(fake_openai, specs) as served, Client(served["beta"][0].url) as client:
        replies = [
            await client.call_tool_mcp("send_message", {"message": "x"}, meta=forged) for _ in range(3)
        ]
    assert [r.is_error for r in replies] == [False, False, True]
    assert "caller anonymous spent 30 tokens of its 20 per hour" in replies[2].content[0].text
    assert "somebody-else" not in replies[2].content[0].text


async def test_budgets_survive_an_agent_restart_on_sqlite(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
    config = agent_config(
        fake_openai.base_url,
        name="keeper",
        conversations={"type": "sqlite", "sqlitePath": str(tmp_path / "conversations.db")},
        budgets={"perCaller": {"window": "day", "tokens": 20}, "agent": {"window": "month", "tokens": 1000}},
    )
    async with serve_agent(config) as agent, Client(agent.url) as client:
        first = await client.call_tool_mcp("send_message", {"message": "one"})
        second = await client.call_tool_mcp("send_message", {"message": "two"})
    assert not first.is_error
    assert not second.is_error
    asked = len(fake_openai.completions)
    async with serve_agent(config) as agent, Client(agent.url) as client:
        third = await client.call_tool_mcp("send_message", {"message": "three"})
        health = (await client.call_tool("get_health", {})).content[0].text
    assert third.structured_content["error"]["code"] == "BUDGET_EXCEEDED"
    assert third.content[0].text.startswith(
        "budget exceeded: caller anonymous spent 30 tokens of its 20 per day"
    )
    assert len(fake_openai.completions) == asked  # refused before the model was asked
    assert '"spend":{"window":"month","tokens":30,"cost":0.0,"tokenLimit":1000' in health


async def test_the_memory_store_forgets_spend_on_restart(fake_openai: FakeOpenAI) -> None:
    """The contrast: the same budget in memory starts again with a new process (docs/api.md)."""
    fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
    config = agent_config(fake_openai.base_url, budgets={"perCaller": {"window": "day", "tokens": 10}})
    for _ in range(2):
        async with serve_agent(config) as agent, Client(agent.url) as client:
            assert not (await client.call_tool_mcp("send_message", {"message": "one"})).is_error
            refused = await client.call_tool_mcp("send_message", {"message": "two"})
            assert refused.structured_content["error"]["code"] == "BUDGET_EXCEEDED"


async def test_with_oidc_the_sub_agent_charges_the_root_caller_and_callers_stay_apart(
    fake_openai: FakeOpenAI,
) -> None:
    """The peer call carries alice's own bearer: beta keys her spend by her, never by the metadata."""
    fake_openai.default = delegation
    async with oidc_issuer() as idp:
        auth = {"mode": "oidc", "oidc": {"issuer": idp.url, "audience": AUDIENCE, "jwksRefreshSeconds": 0}}
        specs: dict[str, dict[str, Any]] = {
            "alpha": {
                "agents": ["beta"],
                "auth": auth,
                "budgets": {"perCaller": {"window": "day", "tokens": 100}},
            },
            "beta": {"auth": auth, "budgets": {"perCaller": {"window": "day", "tokens": 10_000}}},
        }
        async with agents(fake_openai, specs) as served:
            url, beta = served["alpha"][0].url, served["beta"][1]

            def as_(subject: str) -> Client[StreamableHttpTransport]:
                token = idp.token(sub=subject)
                return Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}))

            async with as_("alice") as alice:
                spent = await alice.call_tool_mcp("send_message", {"message": "start"})
            fake_openai.default = Text("fine", usage=FakeUsage(10, 5))
            async with as_("bob") as bob:
                fine = await bob.call_tool_mcp("send_message", {"message": "hello"})
            today = window_start("day", datetime.now(UTC))
            alice_at_beta, bob_at_beta, anonymous_at_beta = await beta.budgets.ledger.read(
                [Bucket("beta", owner, "day", today) for owner in ("sub:alice", "sub:bob", "anonymous")]
            )
    assert spent.structured_content["error"]["code"] == "BUDGET_EXCEEDED"
    assert "caller sub:alice spent 140 tokens of its 100 per day" in spent.content[0].text
    assert not fine.is_error  # bob's budget is his own
    # beta, limited by what alpha passed on, charged its 100 tokens to alice, the caller her
    # forwarded bearer names, and to nobody else.
    assert (alice_at_beta.tokens, bob_at_beta.tokens, anonymous_at_beta.tokens) == (100, 0, 0)
