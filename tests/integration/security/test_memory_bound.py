"""Conversations kept in an agent's memory are bounded in bytes, whatever callers send.

Before, the memory store was bounded by count alone (1,000 conversations): 240 calls of 1 MiB
into 80 conversations took an agent from 256 to 963 MB, and it stayed there. Here 1 GiB of
transcripts (1,024 messages of 1 MiB into 128 conversations) goes through a real `pallas agent`
process with the default budget (`history.maxBytes`, 64 MiB), and its resident memory, read
from /proc after every call, must stay within that budget over what it used idle, plus a fixed
allowance for one call's transient copies (request body, parsed arguments, the LLM request).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastmcp import Client

from pallas_api.fields import DEFAULT_HISTORY_BYTES, MiB
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Text

CALLS = 1024
CONVERSATIONS = 128
ONE_CALL = 32 * MiB
"""What one call in flight may hold besides the kept conversations (measured: about 10 MiB)."""
TIME_LIMIT = 150.0


def rss(pid: int) -> int:
    """The process's resident set size in bytes (`VmRSS` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


async def test_a_gibibyte_of_transcripts_leaves_the_agent_within_its_budget(fake_openai: FakeOpenAI) -> None:
    def answer(_: Any) -> Text:
        fake_openai.requests.clear()  # the test's own memory: 1 GiB of recorded requests otherwise
        return Text("noted")

    fake_openai.default = answer
    async with (
        run_agent_process(agent_config(fake_openai.base_url), env={"OPENAI_API_KEY": "k"}) as agent,
        Client(agent.url) as client,
    ):
        await client.call_tool("send_message", {"message": "warm up", "conversation_id": "warm"})
        idle = rss(agent.pid)
        ceiling = idle + DEFAULT_HISTORY_BYTES + ONE_CALL
        started, peak = time.monotonic(), idle
        for n in range(CALLS):
            message = f"{n} " + "x" * (MiB - 8)
            await client.call_tool(
                "send_message", {"message": message, "conversation_id": f"c{n % CONVERSATIONS}"}
            )
            peak = max(peak, rss(agent.pid))
            assert peak <= ceiling, (
                f"after {n + 1} MiB the agent holds {peak / MiB:.0f} MiB: over its budget "
                f"({idle / MiB:.0f} idle + {DEFAULT_HISTORY_BYTES / MiB:.0f} + {ONE_CALL / MiB:.0f})"
            )
            assert time.monotonic() - started < TIME_LIMIT, f"only {n + 1} calls in {TIME_LIMIT:g}s"
        # The newest conversations are still there, whole.
        last = await client.get_prompt(
            "pallas-test_history", {"conversation_id": f"c{(CALLS - 1) % CONVERSATIONS}"}
        )
        assert last.messages[-2].content.text.startswith(f"{CALLS - 1} ")
