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
  alone, the progress of the turn's steps being the same in both. Both agents run side by side
  and take their messages at the same time, in rounds: this machine's speed drifts over
  seconds, and measured one after the other (even in alternating rounds) the two agents
  differed by the drift as much as by streaming. The first-byte delays are taken before, from
  the streaming agent alone, so that the other agent's work does not delay them.

Targets (issue 31): first streamed byte <= 5 ms after the fake's first token at P50; streaming
adds <= 10 % CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
import yaml
from agent_bench import cpu_seconds, pinned_process
from mcp import ClientSession
from tools_bench import percentiles, session

from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_peers import free_port

AGENT = "streamer"


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


ROUNDS = 10
"""The messages are sent in this many rounds, to both agents at once, so that the load of a
shared machine, which drifts over a run, weighs on both alike."""


@contextlib.asynccontextmanager
async def agent(llm: FakeOpenAI, config: Path, log: Path) -> AsyncIterator[Agent]:
    """`pallas agent` with `config` on CPU 0, warmed up, and an MCP session to it."""
    port = free_port()

    async def ready() -> bool:
        async with httpx2.AsyncClient() as http:
            return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200

    argv = [sys.executable, "-m", "pallas_runtime.cli", "agent", "--config", str(config)]
    argv += ["--port", str(port), "--host", "127.0.0.1"]
    async with pinned_process(argv, ready, log) as proc, session(f"http://127.0.0.1:{port}/mcp") as mcp:
        running = Agent(llm, proc.pid, mcp)
        for _ in range(10):
            await running.send()
        running.first.clear()
        yield running


class Agent:
    """One running agent: sends messages, keeps the first-text delays and the CPU they cost."""

    def __init__(self, llm: FakeOpenAI, pid: int, mcp: ClientSession) -> None:
        self._llm = llm
        self._pid = pid
        self._mcp = mcp
        self.first: list[float] = []
        """Seconds from the fake's first text chunk to the client's first text notification."""
        self.cpu = 0.0
        self.messages = 0

    async def send(self, *, timed: bool = True) -> None:
        """One message; with `timed`, its first-text delay is kept (one agent at a time only:
        the fake's streams are told apart by order)."""
        seen: list[float] = []
        streams = len(self._llm.streams)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if not seen and message and message.startswith(f"{AGENT} text: "):
                seen.append(time.monotonic())

        await self._mcp.call_tool("send_message", {"message": "hi"}, progress_callback=on_progress)
        if timed and len(self._llm.streams) > streams:  # [0] is the role chunk, [1] the first word
            self.first.append(seen[0] - self._llm.streams[-1][1])

    async def round(self, messages: int) -> None:
        before = cpu_seconds(self._pid)
        for _ in range(messages):
            await self.send(timed=False)
        self.cpu += cpu_seconds(self._pid) - before
        self.messages += messages

    @property
    def cpu_ms_per_message(self) -> float:
        return self.cpu / self.messages * 1000


async def main(messages: int, words: int) -> None:
    answer = " ".join(f"word{i}" for i in range(words))
    async with FakeOpenAI(default=Text(answer)) as llm:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            streaming_config = write_config(folder, llm, streaming=True)
            plain_config = write_config(folder, llm, streaming=False)
            async with (
                agent(llm, streaming_config, folder / "a.log") as streamer,
                agent(llm, plain_config, folder / "b.log") as plain,
            ):
                for _ in range(messages):
                    await streamer.send()
                first = list(streamer.first)
                per_round = max(messages // ROUNDS, 1)
                for _ in range(ROUNDS):
                    await asyncio.gather(streamer.round(per_round), plain.round(per_round))
    p50, p95 = percentiles(first)
    streaming, not_streaming = streamer.cpu_ms_per_message, plain.cpu_ms_per_message
    print(f"{messages} messages of {words} words each, every one with a progress token; agents on CPU 0")
    print(f"(first text: the streaming agent alone; CPU: {ROUNDS} rounds, both agents at once)\n")
    print(f"first streamed text after the fake's first token: P50 {p50:.2f} ms, P95 {p95:.2f} ms")
    print("  (target: P50 <= 5 ms)")
    print(f"agent CPU per message, provider streaming    : {streaming:.2f} ms")
    print(f"agent CPU per message, provider not streaming: {not_streaming:.2f} ms")
    print(f"streaming adds {100 * (streaming / not_streaming - 1):+.1f} % CPU per message (target <= 10 %)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--words", type=int, default=100)
    ns = parser.parse_args()
    asyncio.run(main(ns.messages, ns.words))
