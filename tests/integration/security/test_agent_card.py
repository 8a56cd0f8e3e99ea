"""The Agent Card is open (no auth, like the RFC 9728 metadata): it must say nothing private.

An agent without a description published its instruction's first line as the card's
description and its skill's: the instruction (the model's system prompt) is the operator's, not
the public's, and a card is served to anyone, with inbound auth on or not.
"""

from __future__ import annotations

import httpx

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI

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
