"""The Agent Card is open (no auth, like the RFC 9728 metadata): it must say nothing private.

The MCP Server Card (`<mcp-url>/server-card`) is open the same way.

An agent without a description published its instruction's first line as the card's
description and its skill's: the instruction (the model's system prompt) is the operator's, not
the public's, and a card is served to anyone, with inbound auth on or not.
"""

from __future__ import annotations

import httpx

from tests.integration.security.test_one_credential import ACCEPT, oidc_agent
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI
from tests.support.mcp_servers import INITIALIZE
from tests.support.oidc import AUDIENCE, oidc_issuer

INSTRUCTION = "You are Harper. The escalation password is hunter2.\nSecond line."


async def test_a_card_without_a_description_does_not_publish_the_instruction() -> None:
    async with (
        FakeOpenAI() as llm,
        serve_agent(agent_config(llm.base_url, name="harper", instruction=INSTRUCTION)) as agent,
        httpx.AsyncClient() as http,
    ):
        card = (await http.get(f"{agent.base_url}/.well-known/agent-card.json")).json()
    text = str(card)
    assert "hunter2" not in text
    assert "You are Harper" not in text
    assert card["description"] == "Talk to Harper."  # the display title of `harper`
    assert card["skills"][0]["description"] == card["description"]


async def test_the_server_card_is_open_says_how_to_call_and_nothing_private() -> None:
    """The MCP Server Card of an agent behind OIDC: served to anyone, while /mcp refuses them."""
    async with (
        FakeOpenAI() as llm,
        oidc_issuer() as issuer,
        serve_agent(
            oidc_agent(llm.base_url, issuer, "harper", access={"subjects": ["bob"]}, instruction=INSTRUCTION)
        ) as agent,
        httpx.AsyncClient() as http,
    ):
        response = await http.get(f"{agent.url}/server-card")
        refused = await http.post(agent.url, json=INITIALIZE, headers=[ACCEPT])
    assert refused.status_code == 401
    assert response.status_code == 200, response.text
    card = response.json()
    text = response.text
    assert "hunter2" not in text
    assert "You are Harper" not in text
    assert card["name"] == "local.cluster.svc.agents/harper"
    (remote,) = card["remotes"]
    assert remote["url"] == "http://harper.agents.test/mcp"  # the resource callers use, not the bind address
    assert remote["authentication"] == {"required": True, "schemes": ["bearer", "oauth2"]}
    assert card["_meta"]["dev.pallas/agent"]["auth"] == {
        "mode": "oidc",
        "issuer": issuer.url,
        "audience": AUDIENCE,
    }
