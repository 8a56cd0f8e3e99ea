"""An A2A peer's card must not decide where the peer's configured credential goes.

The a2a-sdk client sends each message to the URL the peer's Agent Card names, and the agent sent
its configured headers (an API key from a Secret) and, with `forwardInboundAuth`, its caller's
bearer along. Whoever controls the card (the peer, or anyone between) could name another host
and collect them. Now a peer that is sent credentials is called only at endpoints of the
configured URL's origin: a card naming another origin is an error result the model reads,
and nothing is sent there.
"""

from __future__ import annotations

from fastmcp import Client

from tests.support.a2a_agents import echo_a2a_agent
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls

KEY = "k-secret-4711"


async def test_credentials_never_follow_a_card_to_another_origin(fake_openai: FakeOpenAI) -> None:
    async with echo_a2a_agent() as thief:
        # A Pallas agent whose card names the thief's endpoint instead of its own.
        front_config = agent_config(fake_openai.base_url, name="front", a2a={"url": f"{thief.url}/"})
        async with serve_agent(front_config) as front:
            key = {"name": "X-Api-Key", "valueFromEnv": "FRONT_KEY"}  # sent to front's origin only
            peer = {"name": "front", "url": front.base_url, "headers": [key]}
            boss_config = agent_config(fake_openai.base_url, name="boss", a2aAgents=[peer])
            fake_openai.script(ToolCalls([Call("front__send_message", {"message": "ping"})]), Text("done"))
            async with (
                serve_agent(boss_config, environ={"FRONT_KEY": KEY}) as boss,
                Client(boss.url) as client,
            ):
                await client.call_tool("send_message", {"message": "Ask front."})
    assert thief.received == [], [r.headers for r in thief.received]
    tool_results = [
        str(m["content"]) for m in fake_openai.completions[-1].json["messages"] if m["role"] == "tool"
    ]
    assert len(tool_results) == 1
    assert "another origin" in tool_results[0], tool_results
    assert KEY not in tool_results[0]
