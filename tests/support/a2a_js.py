"""The official JavaScript A2A SDK as a test client: tests/support/a2a_js_client.mjs run on Node 22.

Each run is one operation (card, send, stream, get, cancel) and prints one JSON line per result,
in the SDK's JSON form of the A2A 1.0 types:

    run = await a2a_js(mcp_peers, "send", agent.base_url, "hi")      # JsRun(lines=[{"task": {...}}])
    async with a2a_js_started(mcp_peers, "stream", base, "hi") as proc:   # read events as they come
        first = await next_line(proc)

Runs are subprocesses of the test's event loop (the agent under test is served in that same loop,
so a blocking `subprocess.run` would starve it) and bounded: the script aborts its requests after
`DEADLINE` seconds, and waiting on it gives up a little after that (the process is then killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.mcp_peers import McpPeers

SCRIPT = Path(__file__).with_name("a2a_js_client.mjs")
DEADLINE = 30.0
"""Seconds the script gives all its requests together (`--timeout`)."""
GRACE = 5.0
"""Seconds past the script's own deadline before a test stops waiting for it."""


@dataclass(frozen=True)
class JsRun:
    """What one run of the script printed."""

    lines: list[dict[str, Any]]
    returncode: int
    stderr: str

    @property
    def only(self) -> dict[str, Any]:
        """The one line an operation that is not `stream` prints (fails the test otherwise)."""
        assert self.returncode == 0, self
        assert len(self.lines) == 1, self
        return self.lines[0]


def _argv(
    peers: McpPeers, operation: str, base_url: str, args: tuple[str, ...], context_id: str | None
) -> list[str]:
    argv = [str(peers.node), str(SCRIPT), "--sdk", str(peers.a2a_js), "--timeout", str(DEADLINE)]
    argv += [operation, base_url, *args]
    return argv + (["--context-id", context_id] if context_id else [])


@contextlib.asynccontextmanager
async def a2a_js_started(
    peers: McpPeers,
    operation: str,
    base_url: str,
    *args: str,
    token: str | None = None,
    context_id: str | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The script running `operation` (stdout and stderr piped); killed on exit if still running."""
    env = {"PATH": f"{peers.node_bin_dir}:/usr/bin:/bin"}
    if token is not None:
        env["A2A_BEARER_TOKEN"] = token
    proc = await asyncio.create_subprocess_exec(
        *_argv(peers, operation, base_url, args, context_id),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def next_line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """The next JSON line the running script prints."""
    assert proc.stdout is not None
    async with asyncio.timeout(DEADLINE + GRACE):
        raw = await proc.stdout.readline()
    assert raw, "the JS client ended without printing another line"
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


async def finished(proc: asyncio.subprocess.Process) -> JsRun:
    """The rest of what a started script prints, once it has ended."""
    async with asyncio.timeout(DEADLINE + GRACE):
        stdout, stderr = await proc.communicate()
    lines = [json.loads(line) for line in stdout.decode().splitlines() if line.strip()]
    return JsRun(lines, proc.returncode if proc.returncode is not None else -1, stderr.decode())


async def a2a_js(
    peers: McpPeers,
    operation: str,
    base_url: str,
    *args: str,
    token: str | None = None,
    context_id: str | None = None,
) -> JsRun:
    """Run one operation to its end."""
    async with a2a_js_started(peers, operation, base_url, *args, token=token, context_id=context_id) as proc:
        return await finished(proc)
