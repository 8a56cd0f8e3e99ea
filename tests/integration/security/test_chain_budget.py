"""A delegated call's `_meta` budget (`pallas.dev/budget`) whose `resetsAt` has no timezone.

It passed validation (Python reads `2026-11-29T00:00:00` as a naive time) and raised later, where
it met the agent's own (aware) reset times, as an internal error. RFC 3339 requires an offset:
such a value is now refused up front as invalid arguments saying so, and the model is not asked.
"""

from __future__ import annotations

from fastmcp import Client

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text

BUDGETS = {"perCaller": {"window": "day", "tokens": 1000}}


async def test_a_reset_time_without_a_timezone_is_invalid_arguments() -> None:
    naive = {
        "pallas.dev/budget": {"rootCaller": "sub:root", "tokens": 100, "resetsAt": "2026-11-29T00:00:00"}
    }
    aware = {
        "pallas.dev/budget": {"rootCaller": "sub:root", "tokens": 100, "resetsAt": "2099-11-29T00:00:00Z"}
    }
    async with (
        FakeOpenAI(default=Text("fine")) as llm,
        serve_agent(agent_config(llm.base_url, budgets=BUDGETS)) as agent,
        Client(agent.url) as client,
    ):
        refused = await client.call_tool_mcp("send_message", {"message": "hi"}, meta=naive)
        asked = len(llm.completions)
        served = await client.call_tool_mcp("send_message", {"message": "hi"}, meta=aware)
    assert refused.is_error
    error = (refused.structured_content or {})["error"]
    assert error["code"] == "INVALID_ARGUMENTS", error
    assert "resetsAt" in error["message"]
    assert "timezone" in error["message"]
    assert asked == 0
    assert not served.is_error, served
