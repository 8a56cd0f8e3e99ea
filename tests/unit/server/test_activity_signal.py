"""Scaling's idle signal (issue 53): each pod says when it last started a turn, whatever the protocol."""

from __future__ import annotations

import time

from tests.unit.agent.doubles import text
from tests.unit.server.test_surface import in_memory


async def test_a_turn_sets_the_last_turn_time_and_a_health_call_does_not() -> None:
    async with in_memory([text("hi")]) as agent:
        await agent.client.call_tool_mcp("get_health", {})
        assert agent.count("pallas_last_turn_timestamp_seconds", agent="harper") == 0.0
        before = time.time()
        result = await agent.client.call_tool_mcp("send_message", {"message": "hello"})
        after = time.time()
    assert not result.is_error
    assert before <= agent.count("pallas_last_turn_timestamp_seconds", agent="harper") <= after
