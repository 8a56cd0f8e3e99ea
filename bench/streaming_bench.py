"""Streaming: how soon the caller sees the model's first words, and what streaming costs. Prints figures.

    .venv/bin/python bench/streaming_bench.py [--messages 200] [--words 100]

`pallas agent` runs as its own process pinned to CPU 0 (as in bench/agent_bench.py); the fake
OpenAI server and the client (the MCP SDK's `ClientSession`) run here. Every message gets an
answer of `--words` words, streamed word by word when asked for.

- first streamed byte: for each of `--messages` messages sent with a progress token, the time
  the client receives the first `{agent} text:` notification minus the time the fake sent the
  first text chunk (one clock: same process); P50/P95.
- CPU per message: the agent's user+system time (/proc) over `--messages` messages, all with a
  progress token, from an agent whose provider streams (the text goes out as progress) and from
  one whose provider is declared not to (`capabilities.streaming: false`): the cost of streaming
  alone, the progress of the turn's steps being the same in both.

Targets (issue 31): first streamed byte <= 5 ms after the fake's first token at P50; streaming
adds <= 10 % CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
import yaml
from agent_bench import pinned_process
from tools_bench import percentiles, session

from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_peers import free_port

AGENT = "streamer"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def write_config(folder: Path, llm: FakeOpenAI, *, streaming: bool) -> Path:
    config = folder / f"agent-{streaming}.yaml"
    provider = {"name": "llm", "type": "openai", "baseURL": llm.base_url, "streaming": streaming}
    document = {
        "name": AGENT,
        "model": llm.models[0],
        "provider": provider,
        "conversations": {"scope": "request"},
    }
    config.write_text(yaml.safe_dump(document))
    return config


async def measure(llm: FakeOpenAI, config: Path, messages: int, log: Path) -> tuple[list[float], float]:
    """Time to first streamed text per message, and the agent's CPU ms per message."""
    port = free_port()

    async def ready() -> bool:
        async with httpx2.AsyncClient() as http:
            return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200

    argv = [sys.executable, "-m", "pallas_runtime.cli", "agent", "--config", str(config)]
    argv += ["--port", str(port), "--host", "127.0.0.1"]
    first: list[float] = []
    async with pinned_process(argv, ready, log) as agent, session(f"http://127.0.0.1:{port}/mcp") as mcp:

        async def send() -> None:
            seen: list[float] = []
            streams = len(llm.streams)

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if not seen and message and message.startswith(f"{AGENT} text: "):
                    seen.append(time.monotonic())

            await mcp.call_tool("send_message", {"message": "hi"}, progress_callback=on_progress)
            if len(llm.streams) > streams:  # [0] is the role chunk, [1] the first word
                first.append(seen[0] - llm.streams[-1][1])

        for _ in range(10):
            await send()
        first.clear()
        before = cpu_seconds(agent.pid)
        for _ in range(messages):
            await send()
        return first, (cpu_seconds(agent.pid) - before) / messages * 1000


async def main(messages: int, words: int) -> None:
    answer = " ".join(f"word{i}" for i in range(words))
    async with FakeOpenAI(default=Text(answer)) as llm:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            first, streaming = await measure(
                llm, write_config(folder, llm, streaming=True), messages, folder / "a.log"
            )
            _, plain = await measure(
                llm, write_config(folder, llm, streaming=False), messages, folder / "b.log"
            )
    p50, p95 = percentiles(first)
    print(f"{messages} messages of {words} words each, every one with a progress token; agent on CPU 0\n")
    print(f"first streamed text after the fake's first token: P50 {p50:.2f} ms, P95 {p95:.2f} ms")
    print("  (target: P50 <= 5 ms)")
    print(f"agent CPU per message, provider streaming    : {streaming:.2f} ms")
    print(f"agent CPU per message, provider not streaming: {plain:.2f} ms")
    print(f"streaming adds {100 * (streaming / plain - 1):+.1f} % CPU per message (target <= 10 %)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--words", type=int, default=100)
    ns = parser.parse_args()
    asyncio.run(main(ns.messages, ns.words))
