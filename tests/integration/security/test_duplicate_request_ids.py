"""A JSON-RPC id reused while its request is in flight is refused at once; the first is answered.

The careless client: two `tools/call` with the same id on one MCP session, the second sent while
the first still runs. The MCP SDK keys a session's open response streams by request id and let
the second take over the first's: the first POST was never answered, its stream kept open by
pings for ever. Now the duplicate gets a JSON-RPC error at once and the first completes normally.
Raw HTTP on purpose: no MCP client library lets its user pick request ids.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text

ACCEPT = {"Accept": "application/json, text/event-stream"}
PROTOCOL = "2025-11-25"


def call(request_id: int | str, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "send_message", "arguments": {"message": message}},
    }


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    answer = await http.post(url, json=initialize, headers=ACCEPT)
    headers = {**ACCEPT, "Mcp-Session-Id": answer.headers["mcp-session-id"], "Mcp-Protocol-Version": PROTOCOL}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def answer_to(http: httpx2.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    """POST a request and read its SSE stream until the JSON-RPC answer (pings are skipped)."""
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            return response.status_code, json.loads(await response.aread())
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                message = json.loads(line.removeprefix("data:"))
                if "result" in message or "error" in message:
                    return response.status_code, message
    raise AssertionError("the stream ended without an answer")


async def test_a_reused_in_flight_id_gets_an_error_at_once_and_the_first_call_completes() -> None:
    release = asyncio.Event()
    async with FakeOpenAI(default=Text("second answer")) as llm:
        llm.script(Hold(release, then=Text("first answer")))
        async with (
            serve_agent(agent_config(llm.base_url, name="ids")) as agent,
            httpx2.AsyncClient(timeout=10) as http,
        ):
            session = await open_session(http, agent.url)
            first = asyncio.create_task(answer_to(http, agent.url, call(7, "first"), session))
            await asyncio.wait_for(llm.held.wait(), 10)  # the first call is running, its id in flight

            started = time.monotonic()
            status, duplicate = await asyncio.wait_for(
                answer_to(http, agent.url, call(7, "again"), session), 5
            )
            refused_in = time.monotonic() - started
            # The same id as a string is the same id to the SDK, which keys streams by str(id).
            _, as_text = await asyncio.wait_for(answer_to(http, agent.url, call("7", "again"), session), 5)

            release.set()
            first_status, first_answer = await asyncio.wait_for(first, 5)
            # Once answered, the id is free again.
            _, reused_after = await asyncio.wait_for(answer_to(http, agent.url, call(7, "later"), session), 5)
            async with httpx2.AsyncClient() as scrape:
                metrics = (await scrape.get(agent.base_url + "/metrics")).text

    assert status == 409
    assert duplicate == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32600,
            "message": "request id 7 is already in flight on this session: give each request an id of its "
            "own (JSON-RPC 2.0), or wait for the answer to the first",
        },
    }
    assert refused_in < 1.0
    assert as_text["id"] == "7"
    assert as_text["error"]["code"] == -32600
    assert first_status == 200
    assert first_answer["id"] == 7
    assert first_answer["result"]["content"][0]["text"] == "first answer"
    assert reused_after["result"]["content"][0]["text"] == "second answer"
    assert [c.json["messages"][-1]["content"] for c in llm.completions] == ["first", "later"]
    assert 'pallas_requests_refused_total{agent="ids",reason="duplicate_id"} 2.0' in metrics


async def test_the_same_id_in_flight_on_two_sessions_is_two_requests() -> None:
    release = asyncio.Event()
    async with (
        FakeOpenAI(default=Text("hello")) as llm,
        serve_agent(agent_config(llm.base_url, name="ids")) as agent,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        llm.script(Hold(release), Hold(release))
        one, two = await open_session(http, agent.url), await open_session(http, agent.url)
        calls = asyncio.gather(
            answer_to(http, agent.url, call(1, "a"), one), answer_to(http, agent.url, call(1, "b"), two)
        )
        await asyncio.wait_for(llm.holding_at_least(2), 10)  # both in flight at once
        release.set()
        answers = await asyncio.wait_for(calls, 10)
    assert [(status, a["result"]["content"][0]["text"]) for status, a in answers] == [(200, "hello")] * 2
