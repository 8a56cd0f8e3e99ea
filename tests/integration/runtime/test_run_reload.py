"""`pallas run --reload`: an edit is applied in place where it can be, else by a restart.

`pallas run` runs as a process with two agents (boss calls worker) on the SQLite conversation
store (its default); the test edits the manifest file as a person would and watches the
program's output. An agent is proven not restarted by an MCP session opened before the edits and
used after them: a restarted server would not know the session. An edit a running agent takes
(an instruction) is applied in place, a turn in flight finishing on the old one; an edit it
cannot take (its conversation history limit) restarts it, and the conversation had before goes
on after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from tests.integration.runtime.test_run_command import PALLAS, manifests
from tests.support.agents import QUIET_FASTMCP_ENV
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.mcp_peers import free_ports


@dataclass
class Running:
    """A `pallas run --reload` process and the lines it has written so far."""

    proc: asyncio.subprocess.Process
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def line(self, stream: str, start: str, after: int = 0, limit: float = 30) -> str:
        """The first line of `stream` ("out"/"err") from index `after` on that starts with `start`."""
        lines = self.out if stream == "out" else self.err
        async with asyncio.timeout(limit):
            while True:
                found = next((line for line in lines[after:] if line.startswith(start)), None)
                if found is not None:
                    return found
                assert self.proc.returncode is None, "\n".join(self.err[-20:])
                self.changed.clear()
                await self.changed.wait()


async def _collect(stream: asyncio.StreamReader, into: list[str], changed: asyncio.Event) -> None:
    async for raw in stream:
        into.append(raw.decode().rstrip("\n"))
        changed.set()


@contextlib.asynccontextmanager
async def pallas_run_reload(path: Path, base: int) -> AsyncIterator[Running]:
    proc = await asyncio.create_subprocess_exec(
        *PALLAS,
        "run",
        "-f",
        str(path),
        "--base-port",
        str(base),
        "--reload",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **QUIET_FASTMCP_ENV},
    )
    running = Running(proc)
    assert proc.stdout is not None
    assert proc.stderr is not None
    readers = [
        asyncio.create_task(_collect(proc.stdout, running.out, running.changed)),
        asyncio.create_task(_collect(proc.stderr, running.err, running.changed)),
    ]
    try:
        await running.line("out", "registry ", limit=60)
        yield running
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        await asyncio.gather(*readers)


def edited(docs: list[dict[str, Any]], agent: str, **spec: Any) -> list[dict[str, Any]]:
    """`docs` with `spec` merged into the named PallasAgent's spec."""
    result = [dict(d) for d in docs]
    for doc in result:
        if doc["kind"] == "PallasAgent" and doc["metadata"]["name"] == agent:
            doc["spec"] = {**doc["spec"], **spec}
    return result


async def send(url: str, message: str, conversation_id: str) -> str:
    async with Client(StreamableHttpTransport(url), mode="legacy") as client:
        result = await client.call_tool(
            "send_message", {"message": message, "conversation_id": conversation_id}
        )
    return str(result.content[0].text)


async def test_an_edit_restarts_only_the_changed_agent_and_its_conversations_go_on(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} answers")
    docs = manifests(fake_openai)
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(4)
    boss, worker, helper = (f"http://127.0.0.1:{base + i}/mcp" for i in (1, 2, 3))

    async with (
        pallas_run_reload(path, base) as run,
        Client(StreamableHttpTransport(worker), mode="legacy") as kept,
    ):
        await kept.call_tool("get_health", {})
        assert await send(boss, "first", "c-1") == "boss answers"

        # What the boss's process cannot take (its history limit): only the boss restarts, on its port.
        v2 = edited(docs, "boss", instruction="boss v2", history={"maxMessages": 50})
        path.write_text(yaml.safe_dump_all(v2))
        assert await run.line("out", "reloaded:") == "reloaded: restarted boss; unchanged worker"
        assert await send(boss, "second", "c-1") == "boss v2 answers"
        request = fake_openai.completions[-1].json
        assert request["messages"][0] == {"role": "system", "content": "boss v2"}
        assert [m["content"] for m in request["messages"][1:]] == ["first", "boss answers", "second"]
        await kept.call_tool("get_health", {})  # the worker's server still knows this session

        # An agent added starts on the next port; removed, it stops.
        added = [*v2, {**docs[-1], "metadata": {"name": "helper"}}]
        mark = len(run.out)
        path.write_text(yaml.safe_dump_all(added))
        assert await run.line("out", "reloaded:", after=mark) == (
            "reloaded: started helper; unchanged worker, boss"
        )
        assert await send(helper, "hi", "c-2") == "worker answers"
        mark = len(run.out)
        path.write_text(yaml.safe_dump_all(v2))
        assert (
            await run.line("out", "reloaded:", after=mark)
            == "reloaded: stopped helper; unchanged worker, boss"
        )
        async with httpx2.AsyncClient() as http:
            with contextlib.suppress(httpx2.HTTPError):
                response = await http.get(f"http://127.0.0.1:{base + 3}/readyz")
                raise AssertionError(f"helper still answers: {response.status_code}")

        # A bad edit is reported, naming file, object and field; everything runs as before.
        mark = len(run.err)
        path.write_text(yaml.safe_dump_all(edited(v2, "boss", instruction="boss v3", maxIterations=0)))
        problem = await run.line("err", "pallas run: reload: ", after=mark)
        assert problem.startswith(f"pallas run: reload: {path}:"), problem
        assert "PallasAgent/boss: spec.maxIterations: " in problem, problem
        await run.line("err", "pallas run: reload: the edit is not applied", after=mark)
        assert await send(boss, "third", "c-1") == "boss v2 answers"
        assert await send(worker, "still there?", "c-3") == "worker answers"
        await kept.call_tool("get_health", {})
        assert [line for line in run.out if line.startswith("reloaded:")] == [
            "reloaded: restarted boss; unchanged worker",
            "reloaded: started helper; unchanged worker, boss",
            "reloaded: stopped helper; unchanged worker, boss",
        ]


async def test_an_edit_naming_an_undefined_server_is_applied_with_a_warning(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The gateway seed: an undefined server in a reload is a warning; the agent runs on the rest."""
    fake_openai.default = Text("ok")
    docs = manifests(fake_openai)
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    worker = f"http://127.0.0.1:{base + 2}/mcp"
    async with pallas_run_reload(path, base) as run:
        assert await send(worker, "before", "c-0") == "ok"  # up, and its files watched
        mark = len(run.err)
        path.write_text(yaml.safe_dump_all(edited(docs, "worker", servers=["nope"])))
        warning = await run.line("err", "pallas run: reload: warning: ", after=mark)
        reloaded = await run.line("out", "reloaded:")
        assert await send(worker, "hi", "c-1") == "ok"
    assert warning == (
        "pallas run: reload: warning: PallasAgent/worker: mcpServers nope not defined by the deployment: "
        "the agent runs without them"
    )
    assert reloaded.startswith("reloaded: applied in place worker"), reloaded  # not refused, not restarted


async def test_an_instruction_edit_during_a_turn_is_applied_in_place_and_the_turn_finishes(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("slow answer")))
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} answers")
    docs = manifests(fake_openai)
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    boss = f"http://127.0.0.1:{base + 1}/mcp"

    async with (
        pallas_run_reload(path, base) as run,
        Client(StreamableHttpTransport(boss), mode="legacy") as session,
    ):
        conversation = f"c-{uuid.uuid4()}"  # pallas run's SQLite store outlives the test
        arguments = {"message": "take your time", "conversation_id": conversation}
        turn = asyncio.create_task(session.call_tool("send_message", arguments))
        await fake_openai.held.wait()  # the boss's turn is waiting for its model
        path.write_text(yaml.safe_dump_all(edited(docs, "boss", instruction="boss v2")))
        assert await run.line("out", "reloaded:") == "reloaded: applied in place boss; unchanged worker"
        release.set()
        assert (await turn).content[0].text == "slow answer"  # not "shutting down"
        # The same MCP session (a new process would not know it), the same conversation.
        again = await session.call_tool(
            "send_message", {"message": "and now?", "conversation_id": conversation}
        )
        assert again.content[0].text == "boss v2 answers"
    first, second = (request.json["messages"] for request in fake_openai.completions)
    assert first[0] == {"role": "system", "content": "boss"}
    assert second[0] == {"role": "system", "content": "boss v2"}
    assert [m["content"] for m in second[1:]] == ["take your time", "slow answer", "and now?"]
