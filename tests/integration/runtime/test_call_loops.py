"""Loop protection between real agents: the call path travels with agent-to-agent calls.

Agents served over real HTTP call each other through MCP, thinking with one scripted FakeOpenAI
whose replies depend on the agent's instruction (its system prompt). A model that calls back an
agent already in the call's path, or makes the chain longer than `maxDepth`, gets a clear
refusal instead of a ping-pong between agents.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastmcp import Client

from pallas_api.config import parse_config
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, bound_socket, serve_app


@contextlib.asynccontextmanager
async def agents(
    llm: FakeOpenAI, specs: dict[str, dict[str, Any]]
) -> AsyncIterator[dict[str, RunningServer]]:
    """Serve one agent per spec (name → extra config fields; `agents` lists peer names).

    Every URL is known before any agent is built, so agents may name each other both ways.
    """
    sockets = {name: bound_socket() for name in specs}
    urls = {name: f"http://127.0.0.1:{s.getsockname()[1]}/mcp" for name, s in sockets.items()}
    async with contextlib.AsyncExitStack() as stack:
        served = {}
        for name, fields in specs.items():
            peers = [{"name": peer, "url": urls[peer]} for peer in fields.get("agents", [])]
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
            app = agent_app(build_server(config, environ={}))
            served[name] = await stack.enter_async_context(serve_app(app, sock=sockets[name]))
        yield served


def script(plan: dict[str, str]) -> Callable[[dict[str, Any]], Any]:
    """Each agent (by instruction) calls the peer `plan` names once, then answers with what it got."""

    def step(request: dict[str, Any]) -> Any:
        agent = request["messages"][0]["content"]
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Text(f"{agent} got: {last['content']}")
        if agent in plan:
            return ToolCalls([Call(f"{plan[agent]}__send_message", {"message": f"from {agent}"})])
        return Text(f"{agent} answers")

    return step


def asked(llm: FakeOpenAI, agent: str) -> list[str]:
    """The user messages each turn of `agent` started with."""
    return [
        c.json["messages"][1]["content"]
        for c in llm.completions
        if c.json["messages"][0]["content"] == agent and c.json["messages"][-1]["role"] == "user"
    ]


async def test_an_agent_calling_back_into_its_own_path_is_refused(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = script({"alpha": "beta", "beta": "alpha"})
    specs = {"alpha": {"agents": ["beta"]}, "beta": {"agents": ["alpha"]}}
    async with agents(fake_openai, specs) as served, Client(served["alpha"].url) as client:
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert not result.is_error
    refusal = (
        "Error: calling agent alpha would loop: it is already in this call's path (alpha → beta → alpha)"
    )
    assert result.content[0].text == f"alpha got: beta got: {refusal}"
    assert asked(fake_openai, "alpha") == ["start"]  # alpha was never asked again by beta
    assert asked(fake_openai, "beta") == ["from alpha"]


async def test_a_chain_longer_than_max_depth_is_refused(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = script({"alpha": "beta", "beta": "gamma"})
    specs: dict[str, dict[str, Any]] = {
        "alpha": {"agents": ["beta"]},
        "beta": {"agents": ["gamma"], "maxDepth": 2},
        "gamma": {},
    }
    async with agents(fake_openai, specs) as served, Client(served["alpha"].url) as client:
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert result.content[0].text == (
        "alpha got: beta got: Error: calling agent gamma would make a chain of 3 agents "
        "(alpha → beta → gamma); the maxDepth of agent beta is 2"
    )
    assert asked(fake_openai, "gamma") == []


async def test_the_called_agent_checks_the_path_it_receives(fake_openai: FakeOpenAI) -> None:
    """A caller that is not a Pallas agent (or one that did not check) is refused by the callee."""
    fake_openai.default = Text("fine")
    async with (
        agents(fake_openai, {"alpha": {"maxDepth": 3}}) as served,
        Client(served["alpha"].url) as client,
    ):
        looped = await client.call_tool_mcp(
            "send_message",
            {"message": "x"},
            meta={"pallas.dev/callPath": ["alpha", "beta"], "pallas.dev/hops": 2},
        )
        deep = await client.call_tool_mcp(
            "send_message",
            {"message": "x"},
            meta={"pallas.dev/callPath": ["a", "b", "c"], "pallas.dev/hops": 3},
        )
        malformed = await client.call_tool_mcp(
            "send_message", {"message": "x"}, meta={"pallas.dev/callPath": "a"}
        )
        within = await client.call_tool_mcp(
            "send_message", {"message": "x"}, meta={"pallas.dev/callPath": ["a", "b"], "pallas.dev/hops": 2}
        )
    assert looped.is_error
    assert looped.content[0].text == (
        "agent alpha is already in this call's path (alpha → beta → alpha): refusing a call that would "
        "loop between agents"
    )
    assert (
        deep.content[0].text
        == "agent alpha would be agent 4 of the call chain (a → b → c → alpha); its maxDepth is 3"
    )
    codes = [r.structured_content["error"]["code"] for r in (looped, deep, malformed)]
    assert codes == ["LOOP_DETECTED", "MAX_DEPTH", "INVALID_ARGUMENTS"]
    assert not within.is_error
    assert fake_openai.completions[-1].json["messages"][1]["content"] == "x"
    assert len(fake_openai.completions) == 1  # only the call within the limits reached the model
