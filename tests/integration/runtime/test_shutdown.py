"""Stopping an agent with calls in flight: they end at once, with a reason, and logs stay JSON."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Hold


async def test_sigterm_ends_calls_in_flight_promptly_with_a_clear_error_and_logs_stay_json(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.default = Hold(asyncio.Event())
    config = agent_config(fake_openai.base_url, name="stopping")
    async with run_agent_process(config, stop_grace=30) as proc:
        clients = [Client(StreamableHttpTransport(proc.url), mode="legacy", timeout=60) for _ in range(3)]
        for client in clients:
            await client.__aenter__()
        try:
            calls = [
                asyncio.create_task(c.call_tool("send_message", {"message": f"m{n}"}, raise_on_error=False))
                for n, c in enumerate(clients)
            ]
            await fake_openai.holding_at_least(3)
            stopped_at = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            results = await asyncio.wait_for(asyncio.gather(*calls), 10)
            answered_in = time.monotonic() - stopped_at
        finally:
            for client in clients:
                await client.__aexit__(None, None, None)
        exited_in = await _exited(proc.pid, stopped_at)
        lines = proc.stderr_path.read_text().splitlines()
    assert exited_in < 5, f"the process took {exited_in:.1f}s to exit"
    assert answered_in < 3, f"calls in flight took {answered_in:.1f}s to end"
    for result in results:
        assert result.is_error
        assert result.content[0].text == (
            "agent stopping is shutting down; the message was not processed: send it again"
        )
    records = [json.loads(line) for line in lines]  # every log line is one JSON object
    failures = [r for r in records if r["message"].startswith("send_message failed")]
    assert len(failures) == 3, records
    assert all(r["level"] == "WARNING" and r["agent"] == "stopping" for r in failures)
    assert all("shutting down" in r["message"] for r in failures)
    assert not [r for r in records if r["level"] == "ERROR"], "a stopping agent is not an error"


async def _exited(pid: int, since: float) -> float:
    """Seconds from `since` until the process ended (a zombie waiting to be reaped counts)."""
    for _ in range(300):
        try:
            stat = await asyncio.to_thread(Path(f"/proc/{pid}/stat").read_text)
        except FileNotFoundError:
            break
        if stat.split(") ", 1)[1].startswith("Z"):
            break
        await asyncio.sleep(0.05)
    return time.monotonic() - since
