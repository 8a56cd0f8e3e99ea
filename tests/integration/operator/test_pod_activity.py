"""The scaling loop's reader against a real `pallas agent` process on loopback.

What `engine.pod_activity.read_pod` reads off `/metrics` before any turn, while one is held in
flight (the fake LLM holds its answer until the test releases it), and after it; and that a pod
that does not answer is unknown (None), never idle. No cluster: the pod IP is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_operator.engine.pod_activity import READ_TIME_LIMIT, metrics_url, read_pod
from pallas_operator.status.scaling import PodReading
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Hold, Text


async def reading_when(url: str, wanted: int) -> PodReading:
    """The pod's reading once it has `wanted` turns in flight."""
    async with asyncio.timeout(60):
        while True:
            reading = await read_pod(url, READ_TIME_LIMIT)
            if reading is not None and reading.in_flight == wanted:
                return reading
            await asyncio.sleep(0.05)


async def test_the_reader_sees_a_held_turn_and_when_the_last_one_started(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("Done.")))
    async with run_agent_process(agent_config(fake_openai.base_url, name="scaled")) as agent:
        url = metrics_url("127.0.0.1", agent.port)
        # Read until it answers: just after ready the agent loads its provider's SDK, and on a
        # loaded machine one read can outlast READ_TIME_LIMIT (unknown, which is not this test's).
        assert await reading_when(url, 0) == PodReading(0, None)  # no turn yet

        before = time.time()
        client: Client[Any] = Client(StreamableHttpTransport(agent.url), timeout=60)
        async with client:
            arguments = {"message": "Hello", "conversation_id": "c-1"}
            turn = asyncio.create_task(client.call_tool_mcp("send_message", arguments))
            held = await reading_when(url, 1)
            release.set()
            result = await turn
        after = await reading_when(url, 0)

    assert not result.is_error
    assert held.last_turn_at is not None
    assert before - 1 <= held.last_turn_at <= time.time()
    assert after.last_turn_at == held.last_turn_at  # the turn that ended is still the last one


async def test_a_pod_that_does_not_answer_is_unknown() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert await read_pod(metrics_url("127.0.0.1", port), 0.5) is None
