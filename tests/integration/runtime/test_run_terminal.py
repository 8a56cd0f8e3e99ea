"""`pallas run` as a person sees it on a terminal, and as a program reads it through a pipe.

On a pseudo-terminal (pexpect): coloured, aligned log lines, the start-up table of agents, URLs
and health, no JSON, no uvicorn chatter; `PALLAS_LOG_FORMAT=json` turns the terminal's log lines
into JSON. Through pipes: every stderr line is JSON and stdout has the plain `agent NAME URL`
lines. uvicorn's lines follow the format, and appear only when PALLAS_ROOT_LOG_LEVEL asks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pexpect
import yaml
from fastmcp import Client

from tests.integration.runtime.test_run_command import PALLAS, manifests, pallas_run
from tests.support.agents import QUIET_FASTMCP_ENV
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import free_ports

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
READY = "stop with Ctrl-C"  # rich colours numbers and HTTP verbs, so match plain words
LOG_KNOBS = (
    "PALLAS_LOG_LEVEL",
    "PALLAS_ROOT_LOG_LEVEL",
    "PALLAS_LOG_FORMAT",
    "PALLAS_LOG_STDERR",
    "PALLAS_LOG_FILE",
)


@dataclass
class Terminal:
    """`pallas run` on a pty: the child, its base port and everything it wrote so far."""

    child: pexpect.spawn[str]
    base: int
    transcript: io.StringIO

    def screen(self) -> str:
        """What was written, without colours or carriage returns."""
        return ANSI.sub("", self.transcript.getvalue()).replace("\r", "")

    async def stop(self) -> int:
        """Ctrl-C, as a person stops it; the exit status."""
        self.child.sendintr()
        await self.child.expect(pexpect.EOF, async_=True)
        self.child.close()
        return int(self.child.exitstatus if self.child.exitstatus is not None else -1)


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*LOG_KNOBS, "NO_COLOR", "FORCE_COLOR")}
    return {**env, **QUIET_FASTMCP_ENV, "TERM": "xterm-256color", "XDG_STATE_HOME": str(tmp_path), **extra}


def worker_answers(fake: FakeOpenAI) -> None:
    """The boss asks the worker once, the worker answers, the boss passes it on."""
    fake.script(ToolCalls([Call("worker__send_message", {"message": "6*7?"})]), Text("42"), Text("boss: 42"))


@contextlib.asynccontextmanager
async def on_a_terminal(fake: FakeOpenAI, tmp_path: Path, **env: str) -> AsyncIterator[Terminal]:
    """`pallas run -f FILE` on a 200-column pty, until it says it is running."""
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake)))
    base = free_ports(3)
    transcript = io.StringIO()
    child = pexpect.spawn(
        PALLAS[0],
        [*PALLAS[1:], "run", "-f", str(path), "--base-port", str(base)],
        env=environment(tmp_path, **env),
        cwd=str(tmp_path),
        dimensions=(60, 200),
        encoding="utf-8",
        timeout=90,
    )
    child.logfile_read = transcript
    terminal = Terminal(child, base, transcript)
    try:
        await child.expect(READY, async_=True)
        yield terminal
    finally:
        if child.isalive():
            child.kill(signal.SIGKILL)
        child.close()


async def ask_the_boss(base: int) -> str:
    async with Client(f"http://127.0.0.1:{base + 1}/mcp") as client:
        result = await client.call_tool("send_message", {"message": "ask the worker"})
    return str(result.content[0].text)


async def test_a_terminal_gets_the_startup_table_and_coloured_lines_never_json(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    worker_answers(fake_openai)
    async with on_a_terminal(fake_openai, tmp_path) as term:
        assert await ask_the_boss(term.base) == "boss: 42"
        await term.child.expect("ALLOW", async_=True)
        assert await term.stop() == 0
    raw, screen = term.transcript.getvalue(), term.screen()
    base = term.base
    assert re.search(r"^\s+URL\s+health\s*$", screen, re.M), screen
    assert re.search(rf"^agent worker\s+http://127\.0\.0\.1:{base + 2}/mcp\s+ok\s*$", screen, re.M), screen
    assert re.search(rf"^agent boss\s+http://127\.0\.0\.1:{base + 1}/mcp\s+ok\s*$", screen, re.M), screen
    registry = rf"^registry\s+http://127\.0\.0\.1:{base}/\.well-known/mcp/server\.json\s+serving\s*$"
    assert re.search(registry, screen, re.M), screen
    # Log lines: time, level and message in columns; the agent named first.
    assert re.search(r"^\d\d:\d\d:\d\d INFO\s+running 2 agent\(s\); stop with Ctrl-C", screen, re.M), screen
    audit = r"^\d\d:\d\d:\d\d INFO\s+boss tool call worker/send_message: ALLOW in \d+ ms"
    assert re.search(audit, screen, re.M), screen
    assert "\x1b[" in raw  # coloured
    assert '{"' not in screen  # no JSON anywhere
    assert "Started server process" not in screen  # uvicorn is quiet by default
    assert "Application startup complete" not in screen


async def test_pallas_log_format_json_on_a_terminal_gives_json_lines_uvicorn_included(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    async with on_a_terminal(
        fake_openai, tmp_path, PALLAS_LOG_FORMAT="json", PALLAS_ROOT_LOG_LEVEL="INFO"
    ) as term:
        async with httpx2.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{term.base + 1}/readyz")).status_code == 200
        await term.child.expect("readyz", async_=True)
        assert await term.stop() == 0
    plain = re.compile(r"^(agent \S+|registry)\s+http://127\.0\.0\.1:\d+/\S+$")  # stdout, for programs
    records = []
    for echoed in filter(None, term.transcript.getvalue().replace("\r", "").splitlines()):
        line = echoed.removeprefix("^C")  # the terminal echoes the Ctrl-C
        if not plain.match(line):
            try:
                records.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"not JSON: {line!r}") from None
    assert "\x1b[" not in term.transcript.getvalue()
    loggers = {r["logger"] for r in records}
    assert {"pallas.run", "uvicorn.error", "uvicorn.access"} <= loggers, loggers
    access = [r for r in records if r["logger"] == "uvicorn.access" and "GET /readyz" in r["message"]]
    assert access[0]["agent"] == "boss", access  # the line names the agent that served it


async def test_uvicorn_lines_on_a_terminal_are_console_lines_when_asked_for(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    async with on_a_terminal(fake_openai, tmp_path, PALLAS_ROOT_LOG_LEVEL="INFO") as term:
        async with httpx2.AsyncClient() as http:
            await http.get(f"http://127.0.0.1:{term.base + 1}/readyz")
        await term.child.expect("readyz", async_=True)
        assert await term.stop() == 0
    screen = term.screen()
    assert re.search(
        r'^\d\d:\d\d:\d\d INFO\s+boss 127\.0\.0\.1:\d+ - "GET /readyz HTTP/1\.1" 200', screen, re.M
    ), screen
    assert re.search(r"^\d\d:\d\d:\d\d INFO\s+worker Started server process", screen, re.M), screen
    assert '{"' not in screen


async def test_through_pipes_every_stderr_line_is_json_and_stdout_has_the_urls(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    worker_answers(fake_openai)
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai)))
    base = free_ports(3)
    defaults = dict.fromkeys(LOG_KNOBS, "")  # pallas_run asks for DEBUG; these are the defaults
    async with pallas_run(path, base, env={**defaults, "XDG_STATE_HOME": str(tmp_path)}) as proc:
        assert await ask_the_boss(base) == "boss: 42"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["agent", "worker"],
        ["agent", "boss"],
        ["registry", f"http://127.0.0.1:{base}/.well-known/mcp/server.json"],
    ]
    records = [json.loads(line) for line in err.splitlines()]  # every line is one JSON object
    assert not [r for r in records if r["logger"].startswith("uvicorn")], "uvicorn is quiet by default"
    [audit] = [r for r in records if r["logger"] == "pallas.audit"]
    assert {k: audit[k] for k in ("agent", "deployment", "server", "tool", "outcome")} == {
        "agent": "boss",
        "deployment": "local",
        "server": "worker",
        "tool": "send_message",
        "outcome": "ALLOW",
    }
    serving = [r for r in records if r["message"].startswith("agent worker serving on")]
    assert serving[0]["url"] == f"http://127.0.0.1:{base + 2}/mcp"
