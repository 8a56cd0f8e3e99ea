"""Large tool results and answers: read, cut to the model's budget with a marker, or refused by name."""

from __future__ import annotations

from typing import Any

import httpx2
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StreamableHttpTransport

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve


def big_mcp() -> FastMCP:
    mcp = FastMCP("big")

    @mcp.tool
    def hugekb(kb: int) -> str:
        """Return `kb` KiB of text."""
        return "x" * (kb * 1024)

    return mcp


def tool_result(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "tool")


async def ask(url: str, message: str = "go") -> Any:
    async with Client(StreamableHttpTransport(url), mode="legacy", timeout=60) as client:
        return await client.call_tool("send_message", {"message": message}, raise_on_error=False)


async def test_an_800_kib_result_is_read_and_cut_to_the_models_budget(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(ToolCalls([Call("big__hugekb", {"kb": 800})]), Text("done"))
    async with serve(big_mcp()) as big:
        config = agent_config(fake_openai.base_url, servers=[{"name": "big", "url": big.url}])
        async with serve_agent(config) as agent:
            result = await ask(agent.url)
    assert result.content[0].text == "done"
    given = tool_result(fake_openai.completions[1].json)
    assert given.endswith("[… result of big__hugekb cut: 800 KiB in all; the first 256 KiB are shown]")
    assert len(given.encode()) == 256 * 1024


async def test_a_5_mib_result_over_the_servers_limit_is_refused_by_name(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(ToolCalls([Call("big__hugekb", {"kb": 5 * 1024})]), Text("too big then"))
    async with serve(big_mcp()) as big:
        config = agent_config(
            fake_openai.base_url, servers=[{"name": "big", "url": big.url, "maxResultBytes": 4 * 1024 * 1024}]
        )
        async with serve_agent(config) as agent:
            result = await ask(agent.url)
            text = (await ask(agent.url, "again")).content[0].text
    assert result.content[0].text == "too big then"
    assert tool_result(fake_openai.completions[1].json) == (
        "Error: big: the result of hugekb is 5 MiB; the limit is 4 MiB (maxResultBytes)"
    )
    assert text == "ok"  # the server's session survived: nothing was a transport failure


async def test_a_5_mib_result_within_the_default_limit_is_read(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(ToolCalls([Call("big__hugekb", {"kb": 5 * 1024})]), Text("read it"))
    async with serve(big_mcp()) as big:
        config = agent_config(fake_openai.base_url, servers=[{"name": "big", "url": big.url}])
        async with serve_agent(config) as agent:
            result = await ask(agent.url)
    assert result.content[0].text == "read it"
    assert "5 MiB in all" in tool_result(fake_openai.completions[1].json)


async def test_a_peers_answer_over_a_mib_reaches_the_caller_cut_and_every_client_reads_answers(
    fake_openai: FakeOpenAI,
) -> None:
    huge = "y" * (1536 * 1024)

    def step(request: dict[str, Any]) -> Any:
        system, last = request["messages"][0]["content"], request["messages"][-1]
        if system == "peer":
            return Text(huge)
        if last["role"] == "tool":
            return Text(f"peer said {len(last['content'])} characters")
        return ToolCalls([Call("peer__send_message", {"message": "talk a lot"})])

    fake_openai.default = step
    async with serve_agent(agent_config(fake_openai.base_url, name="peer", instruction="peer")) as peer:
        boss = agent_config(
            fake_openai.base_url, name="boss", instruction="boss", agents=[{"name": "peer", "url": peer.url}]
        )
        async with serve_agent(boss) as orchestrator:
            result = await ask(orchestrator.url)
            direct = await ask(peer.url)  # the SDK's own client reads at most 1 MiB per event
    assert result.content[0].text.startswith("peer said ")
    # The peer cut its answer to 512 KiB; the orchestrator's model got the first 256 KiB of that.
    delivered = tool_result(fake_openai.completions[2].json)
    assert delivered.endswith(
        "[… result of peer__send_message cut: 512 KiB in all; the first 256 KiB are shown]"
    )
    assert not direct.is_error
    assert direct.content[0].text.endswith("[… answer cut: 1.5 MiB in all; the first 512 KiB are shown]")


async def test_a_request_over_the_body_limit_gets_a_json_rpc_error_naming_it_and_is_counted(
    fake_openai: FakeOpenAI,
) -> None:
    async with serve_agent(agent_config(fake_openai.base_url)) as agent:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "send_message", "arguments": {"message": "x" * (5 * 1024 * 1024)}},
        }
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(
                agent.url, json=body, headers={"Accept": "application/json, text/event-stream"}
            )
            metrics = (await http.get(f"{agent.base_url}/metrics")).text
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error["message"].startswith("the request is 5 MiB; this agent accepts at most 4 MiB per request")
    assert 'pallas_requests_refused_total{agent="pallas-test",reason="too_large"} 1.0' in metrics
    assert fake_openai.completions == []
