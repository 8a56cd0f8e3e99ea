"""Request bodies sent without a declared size, against a real `pallas agent` process.

The 4 MiB request limit used to check only a declared `Content-Length`: a chunked `POST /a2a`
of 32-64 MiB was read whole (an agent grew 264 → 712 MB), and so was a chunked `POST /mcp`
before the MCP SDK refused it. Now a body without a declared size is counted as it arrives and
refused with 413 and a JSON-RPC error naming the limit as soon as it passes it, whatever the
route, so what the process holds stays near the limit; a small chunked request is served. The
stdio bridge (`pallas bridge`) bounds its bodies the same way.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from tests.integration.runtime.test_bridge import PALLAS, SERVING, credential, process
from tests.integration.security.raw_http import MiB, RssWatch, head, send
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.ports import logged_port

RSS_BOUND = 40 * MiB
"""Peak growth allowed for two 32 MiB chunked bodies; read whole they cost well over +64 MiB."""


def chunked(target: str, body: bytes, *, chunk: int = 1 * MiB) -> bytes:
    """A chunked POST of `body` to `target`, in `chunk`-byte chunks."""
    fields = ("Content-Type: application/json", "A2A-Version: 1.0", "Transfer-Encoding: chunked")
    data = head(target, *fields, method="POST")
    for start in range(0, len(body), chunk):
        piece = body[start : start + chunk]
        data += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return data + b"0\r\n\r\n"


def padded_list_tasks(size: int) -> bytes:
    """A well-formed A2A JSON-RPC request padded to about `size` bytes."""
    pad = "p" * max(0, size - 200)
    # Unknown params are ignored (the SDK parses them for forward compatibility).
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pad": pad}}).encode()


async def test_chunked_bodies_over_the_limit_are_refused_as_they_arrive() -> None:
    async with (
        FakeOpenAI(default=Text("fine")) as llm,
        run_agent_process(agent_config(llm.base_url), env={"OPENAI_API_KEY": "k"}) as running,
    ):
        port = running.port
        # Warm the A2A path first, so the watch measures the bodies, not the first call's imports.
        warm = await send(port, chunked("/a2a", padded_list_tasks(1024)))
        assert warm.status == 200, warm
        watch = RssWatch(running.pid)
        async with watch.watching():
            big_a2a, big_a2a_too, big_mcp = await asyncio.gather(
                send(port, chunked("/a2a", padded_list_tasks(32 * MiB))),
                send(port, chunked("/a2a", padded_list_tasks(32 * MiB))),
                send(port, chunked("/mcp", padded_list_tasks(8 * MiB))),
            )
        print(watch.report("agent under 2 x 32 MiB chunked POST /a2a and 8 MiB chunked POST /mcp"))
        for answer in (big_a2a, big_a2a_too, big_mcp):
            assert answer.status == 413, answer
            error = json.loads(answer.body)["error"]
            assert error["code"] == -32600
            assert error["message"].startswith(
                "the request is over 4 MiB; this agent accepts at most 4 MiB per request"
            ), error
        assert watch.peak_growth < RSS_BOUND, watch.report("agent")

        # A chunked body within the limit is served as before, on both routes.
        small = await send(port, chunked("/a2a", padded_list_tasks(3 * MiB), chunk=64 * 1024))
        assert small.status == 200, small
        assert "result" in json.loads(small.body)


async def test_the_bridge_refuses_a_chunked_body_over_the_limit(tmp_path: Path) -> None:
    # The bridge's HTTP app serves before its stdio server is up: no server is needed here.
    fifos = tmp_path / "stdio"
    assert subprocess.run([*PALLAS, "bridge", "--make-fifos", str(fifos)], check=False).returncode == 0
    log = tmp_path / "bridge.log"
    argv = [*PALLAS, "bridge", "--name", "s", "--fifos", str(fifos), "--port", "0", "--host", "127.0.0.1"]
    with process([*argv, *credential(tmp_path)], log) as bridge:
        port = logged_port(log, SERVING, alive=bridge.poll)
        answer = await send(port, chunked("/mcp", padded_list_tasks(8 * MiB)))
    assert answer.status == 413, answer
    assert json.loads(answer.body)["error"]["message"].startswith("the request is over 4 MiB"), answer
