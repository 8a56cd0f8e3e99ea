"""What the libraries alone cost per streamed message, before any Pallas code runs. Prints figures.

    .venv/bin/python bench/streaming_floor.py [--seconds 20] [--words 100]

bench/streaming_bench.py measures what streaming adds to an agent's CPU per message (issue 31's
target: at most 10 %). This measures the least any agent on the same libraries could add. As in
that bench, two processes run on CPU 0 at once for `--seconds` (the machine's speed drifts over
seconds, and two busy processes read a stream in as many pieces as a busy agent does); the fake
OpenAI server and the clients run here, on the other CPU.

- reading: two bare clients fetch the same `--words`-word answer from the fake OpenAI server,
  one as a JSON body, the other as a stream of one event per word (one HTTP chunk each, as
  providers send tokens). Each does the least a reader must: for the body, read and decode it;
  for the stream, read every chunk, split the lines and decode each event's JSON. Three pairs:
  aiohttp (the agent's transport), aiohttp reading only and decoding nothing (the transport's
  own share), and httpx2 over its default httpcore2 transport (the SDKs' default). Printed: CPU
  per message (user + system), the system (kernel) part of the difference, and how many reads a
  stream took.
- notifying: two bare fastmcp servers (no Pallas code) whose tool sends 0 or 2 progress
  notifications of a short text; the difference of their CPU per call is what an agent's
  streamed message pays to send its text: the first piece at once and, for an answer written
  within `TEXT_INTERVAL`, the rest at the end.

Their sum is the floor of what streaming adds per message on these libraries, to set against an
agent's CPU per message without streaming (bench/streaming_bench.py prints it; docs/runtime.md,
"The floor under it").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_bench import answers_http, cpu_seconds, pinned_process
from mcp import ClientSession
from tools_bench import session

from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_peers import free_port

READER = """
import asyncio, json, os, sys, time
import aiohttp, httpx2
from pydantic_core import from_json

URL, CLIENT, STREAM, SECONDS = sys.argv[1], sys.argv[2], sys.argv[3] == "streamed", float(sys.argv[4])
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": STREAM}
DECODE = CLIENT != "aiohttp-raw"
READS = [0]


def events(data):
    # The least a stream's reader does: split the lines, decode each event's JSON.
    for line in data.split(b"\\n"):
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            from_json(line[5:].strip())


class Lines:
    def __init__(self):
        self.rest = b""

    def feed(self, chunk):
        data = self.rest + chunk
        cut = data.rfind(b"\\n") + 1
        events(data[:cut])
        self.rest = data[cut:]


async def aiohttp_client():
    async with aiohttp.ClientSession() as http:
        async def one():
            async with http.post(URL, json=BODY) as response:
                if not STREAM:
                    body = await response.read()
                    if DECODE:
                        from_json(body)
                    return
                lines = Lines()
                async for chunk in response.content.iter_chunked(16384):
                    READS[0] += 1
                    if DECODE:
                        lines.feed(chunk)
        await measure(one)


async def httpx_client():
    async with httpx2.AsyncClient() as http:
        async def one():
            async with http.stream("POST", URL, json=BODY) as response:
                if not STREAM:
                    from_json(await response.aread())
                    return
                lines = Lines()
                async for chunk in response.aiter_raw():
                    READS[0] += 1
                    lines.feed(chunk)
        await measure(one)


async def measure(one):
    for _ in range(20):  # warm up
        await one()
    print("ready", flush=True)
    sys.stdin.readline()  # both readers start together
    before, started, messages, READS[0] = os.times(), time.monotonic(), 0, 0
    while time.monotonic() - started < SECONDS:
        await one()
        messages += 1
    after = os.times()
    user, system = after.user - before.user, after.system - before.system
    per = 1000 / messages
    print(json.dumps({"ms": (user + system) * per, "system": system * per, "reads": READS[0] / messages}))


asyncio.run(httpx_client() if CLIENT == "httpx2" else aiohttp_client())
"""

NOTIFIER = """
import sys
import uvicorn
from fastmcp import Context, FastMCP
mcp = FastMCP("notifier")
@mcp.tool(output_schema=None)
async def speak(n: int, ctx: Context) -> str:
    for i in range(n):
        await ctx.report_progress(i, None, "agent text: word1 word2 word3")
    return "done"
app = mcp.http_app(path="/mcp")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

CLIENTS = ("aiohttp-raw", "aiohttp", "httpx2")
NOTIFICATIONS = 2
"""What an agent's streamed message sends when the model writes within `TEXT_INTERVAL`."""


async def reading(llm: FakeOpenAI, client: str, seconds: float) -> dict[str, dict[str, float]]:
    """CPU per message (ms) and reads of a body per message of two readers on CPU 0 at once, one
    of plain bodies, one of streams."""
    url = f"{llm.base_url}/chat/completions"
    procs = {
        kind: await asyncio.create_subprocess_exec(
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            READER,
            url,
            client,
            kind,
            str(seconds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for kind in ("plain", "streamed")
    }
    for proc in procs.values():
        assert proc.stdout is not None
        await proc.stdout.readline()  # warmed up
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    outs = {kind: (await proc.communicate())[0] for kind, proc in procs.items()}
    for kind, proc in procs.items():
        if proc.returncode != 0:
            raise RuntimeError(f"the {client} reader of {kind} answers failed ({proc.returncode})")
    return {kind: json.loads(out) for kind, out in outs.items()}


async def notifying(seconds: float) -> dict[int, float]:
    """CPU per call (ms) of two fastmcp servers on CPU 0 at once, one sending no notification per
    call, the other `NOTIFICATIONS`; each called in turn by a session of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            servers = {}
            for n in (0, NOTIFICATIONS):
                port = free_port()
                argv = [sys.executable, "-c", NOTIFIER, str(port)]
                ready = answers_http(f"http://127.0.0.1:{port}/mcp")
                server = await stack.enter_async_context(pinned_process(argv, ready, Path(tmp) / f"{n}.log"))
                mcp = await stack.enter_async_context(session(f"http://127.0.0.1:{port}/mcp"))
                for _ in range(20):  # warm up
                    await speak(mcp, n)
                servers[n] = (server.pid, mcp)

            async def calls(n: int) -> float:
                pid, mcp = servers[n]
                before, started, count = cpu_seconds(pid), time.monotonic(), 0
                while time.monotonic() - started < seconds:
                    await speak(mcp, n)
                    count += 1
                return (cpu_seconds(pid) - before) / count * 1000

            figures = await asyncio.gather(*(calls(n) for n in servers))
    return dict(zip(servers, figures, strict=True))


async def speak(mcp: ClientSession, n: int) -> None:
    async def ignore(progress: float, total: float | None, message: str | None) -> None:
        return None

    await mcp.call_tool("speak", {"n": n}, progress_callback=ignore)


async def main(seconds: float, words: int) -> None:
    answer = " ".join(f"word{i}" for i in range(words))
    async with FakeOpenAI(default=Text(answer)) as llm:
        read = {client: await reading(llm, client, seconds) for client in CLIENTS}
    calls = await notifying(seconds)
    print(f"{words}-word answers, one event per word; two processes on CPU 0 at once, {seconds:.0f} s each\n")
    print("reading, CPU per message  plain      streamed   streaming adds (kernel's part)  reads of a stream")
    for client, figures in read.items():
        plain, streamed = figures["plain"], figures["streamed"]
        added, kernel = streamed["ms"] - plain["ms"], streamed["system"] - plain["system"]
        print(
            f"  {client:<20} {plain['ms']:6.3f} ms  {streamed['ms']:6.3f} ms"
            f"  {added:6.3f} ms ({kernel:6.3f} ms)  {streamed['reads']:17.1f}"
        )
    notifications = calls[NOTIFICATIONS] - calls[0]
    print(f"notifying: a call sending {NOTIFICATIONS} progress notifications costs the server")
    print(f"  {calls[NOTIFICATIONS]:.3f} ms against {calls[0]:.3f} ms: {notifications:.3f} ms more")
    floor = read["aiohttp-raw"]["streamed"]["ms"] - read["aiohttp-raw"]["plain"]["ms"] + notifications
    print(
        f"floor of what streaming adds per message (aiohttp reading alone, the notifications): {floor:.3f} ms"
    )
    print(f"  streaming adds <= 10 % only to messages costing >= {floor * 10:.2f} ms without it")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--words", type=int, default=100)
    ns = parser.parse_args()
    asyncio.run(main(ns.seconds, ns.words))
