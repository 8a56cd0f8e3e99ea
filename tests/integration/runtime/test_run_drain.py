"""`pallas run` drains its agents as a pod does: on SIGTERM, and when a restart replaces one.

The LLM is a fake that holds each request until the test releases it, so a turn lasts as long as
the test needs. The first test runs `pallas run` as a process and signals it; the second drives
the hosting (`LocalRun`) in this process, as `--reload` does when an edit needs a new server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_runtime.commands.run.hosted import LocalRun
from pallas_runtime.commands.run.manifests import load_manifests, plan_local
from pallas_runtime.metrics import RuntimeMetrics
from tests.integration.runtime.test_run_command import manifests
from tests.integration.runtime.test_shutdown import initialize, readiness
from tests.support.agents import QUIET_FASTMCP_ENV
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.mcp_peers import free_ports

PALLAS = [sys.executable, "-m", "pallas_runtime.cli"]


def session(url: str) -> Client[Any]:
    return Client(StreamableHttpTransport(url), mode="legacy", timeout=60)


def worker_manifests(llm: FakeOpenAI, *, instruction: str = "worker") -> list[dict[str, Any]]:
    """The worker of `manifests()` alone (no registry needed), with `instruction`."""
    docs = [d for d in manifests(llm) if d["metadata"]["name"] != "boss"]
    for doc in docs:
        if doc["kind"] == "PallasAgent":
            doc["spec"]["instruction"] = instruction
    return docs


async def test_sigterm_to_pallas_run_lets_the_turns_in_flight_finish(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.default = Hold(release, then=Text("done"))
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(worker_manifests(fake_openai)))
    base = free_ports(2)
    worker = f"http://127.0.0.1:{base + 1}"
    proc = await asyncio.create_subprocess_exec(
        *PALLAS, "run", "-f", str(path), "--base-port", str(base), "--agent", "worker",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **QUIET_FASTMCP_ENV},
    )  # fmt: skip
    try:
        await readiness(worker, 200)
        async with session(f"{worker}/mcp") as client:
            turn = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "take your time"}))
            await fake_openai.holding_at_least(1)
            proc.send_signal(signal.SIGTERM)
            assert await readiness(worker, 503) == {"status": "draining"}
            refused = await initialize(f"{worker}/mcp")
            release.set()
            answer = await asyncio.wait_for(turn, 30)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.stderr is not None
    log = (await proc.stderr.read()).decode()
    assert (answer.is_error, answer.content[0].text) == (False, "done")
    assert refused.status_code == 503
    assert refused.json()["error"]["data"]["code"] == "AGENT_SHUTTING_DOWN"
    assert "waiting up to 120s for 1 turn(s) in flight to finish; Ctrl-C again to interrupt them" in log


async def test_a_restart_hands_the_port_to_the_new_server_while_the_old_one_finishes_its_turn(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def answer(request: dict[str, Any]) -> Any:
        system = request["messages"][0]["content"]
        if system == "v1":  # the old config's turn lasts until the test says
            held.set()
            await release.wait()
        return Text(f"{system} answers")

    fake_openai.default = answer
    base = free_ports(2)
    url = f"http://127.0.0.1:{base + 1}/mcp"

    def plan(instruction: str) -> Any:
        path = tmp_path / f"{instruction}.yaml"
        path.write_text(yaml.safe_dump_all(worker_manifests(fake_openai, instruction=instruction)))
        return plan_local(load_manifests([path]), base, "worker")

    first = plan("v1")
    run = LocalRun(first, RuntimeMetrics(), {})
    try:
        await run.start_agent(first.agents[0])
        async with session(url) as old_client:
            # Listed first, as MCP clients do: else the SDK lists them right after the call's
            # answer, on a new connection, which the new server answers 404 (its session is the
            # old server's), exactly as a replacement pod would.
            await old_client.list_tools()
            old_turn = asyncio.create_task(old_client.call_tool_mcp("send_message", {"message": "slow"}))
            await held.wait()

            await run.restart_agent(plan("v2").agents[0])  # returns once the new server listens
            async with session(url) as new_client:  # the same port, at once: the new config
                fresh = await new_client.call_tool_mcp("send_message", {"message": "quick"})
            assert fresh.content[0].text == "v2 answers"
            assert not old_turn.done()  # the old server still works on its turn

            release.set()
            finished = await asyncio.wait_for(old_turn, 30)
        assert (finished.is_error, finished.content[0].text) == (False, "v1 answers")
    finally:
        await run.close()
