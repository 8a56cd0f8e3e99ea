"""The fleet endpoint: the registry of `pallas run` serves its agents as one MCP server at `/mcp`.

`pallas run` hosts two agents (boss, worker) on the scripted fake OpenAI server and the registry
on the base port; fastmcp's own Client talks to the registry's `/mcp` in both of its modes (the
default, which negotiates, and `legacy`, the initialize handshake).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import yaml
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from fastmcp.exceptions import ToolError

from tests.integration.runtime.test_run_command import manifests, pallas_run, registry_up
from tests.integration.runtime.test_run_reload import pallas_run_reload
from tests.integration.runtime.test_streaming import Progress
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.mcp_peers import free_ports
from tests.support.waiting import until

MODES = [pytest.param({}, id="default"), pytest.param({"mode": "legacy"}, id="legacy")]
WORKER_SAYS = "Six times seven is forty-two."


def fleet_manifests(llm: FakeOpenAI) -> list[dict[str, Any]]:
    """boss and worker; the worker says what it does and declares a capability."""
    docs = manifests(llm)
    for doc in docs:
        if doc["kind"] == "PallasAgent" and doc["metadata"]["name"] == "worker":
            doc["spec"] |= {"description": "Does arithmetic for the team", "capabilities": ["math"]}
    return docs


def manifest_file(directory: Path, docs: list[dict[str, Any]]) -> Path:
    """`docs` written to `agents.yaml` in `directory`."""
    path = directory / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def ready_agents(client: Client[Any], count: int) -> list[dict[str, Any]]:
    """`list_agents(ready=true)` once `count` agents are ready (the registry polls them).

    90 s: agents start slowly on a machine running four test lanes beside a cluster.
    """
    async with asyncio.timeout(90):
        while True:
            result = await client.call_tool("list_agents", {"ready": True}, raise_on_error=False)
            if not result.is_error:  # else: not loaded yet
                agents = json.loads(result.content[0].text)
                if len(agents) == count:
                    return agents
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("mode", MODES)
async def test_the_fleet_lists_reports_and_relays_to_its_agents(
    fake_openai: FakeOpenAI, tmp_path: Path, mode: dict[str, Any]
) -> None:
    fake_openai.default = lambda request: Text(
        WORKER_SAYS if request["messages"][0]["content"] == "worker" else "boss here"
    )
    path = manifest_file(tmp_path, fleet_manifests(fake_openai))
    base = free_ports(3)
    async with pallas_run(path, base):
        await registry_up(base)
        async with Client(f"http://127.0.0.1:{base}/mcp", **mode) as fleet:
            await _check_fleet(fleet, base, fake_openai)


async def _check_fleet(fleet: Client[Any], base: int, fake_openai: FakeOpenAI) -> None:
    agents = await ready_agents(fleet, 2)
    assert [a["name"] for a in agents] == ["boss", "worker"]
    worker = agents[1]
    assert worker["description"] == "Does arithmetic for the team"
    assert worker["capabilities"] == ["math"]
    assert worker["url"] == f"http://127.0.0.1:{base + 2}/mcp"
    assert (worker["status"], worker["phase"], worker["health"]["status"]) == ("ready", "Ready", "ok")

    math = await fleet.call_tool("list_agents", {"capability": "math"})
    assert [a["name"] for a in json.loads(math.content[0].text)] == ["worker"]
    found = await fleet.call_tool("list_agents", {"search": "BOS"})
    assert [a["name"] for a in json.loads(found.content[0].text)] == ["boss"]
    with pytest.raises(ToolError, match="capability"):
        await fleet.call_tool("list_agents", {"capability": "not a tag!"})

    tools = {tool.name: tool for tool in await fleet.list_tools()}
    assert set(tools) == {"list_agents", "get_agent_health", "registry_health", "boss", "worker"}
    assert tools["worker"].description == "Does arithmetic for the team"
    assert tools["worker"].input_schema["required"] == ["message"]

    health = json.loads((await fleet.call_tool("get_agent_health", {"agent": "worker"})).content[0].text)
    assert (health["name"], health["ready"], health["health"]["status"]) == ("worker", True, "ok")
    with pytest.raises(ToolError, match="no agent 'nobody'"):
        await fleet.call_tool("get_agent_health", {"agent": "nobody"})
    registry = json.loads((await fleet.call_tool("registry_health", {})).content[0].text)
    assert registry["catalogue"] == {"loaded": True, "connected": True, "agents": 2, "ready": 2}
    assert registry["status"] in ("ok", "degraded")

    progress = Progress()
    answer = await fleet.call_tool("worker", {"message": "what is 6*7?"}, progress_handler=progress)
    assert answer.content[0].text == WORKER_SAYS
    assert not answer.is_error
    # The agent streamed its answer as progress; the fleet relayed it, word by word.
    assert progress.text("worker text: ") == WORKER_SAYS, progress.messages
    assert fake_openai.completions[-1].json["messages"][-1] == {"role": "user", "content": "what is 6*7?"}


class ToolsChanged(MessageHandler):
    """Counts `notifications/tools/list_changed`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = asyncio.Event()

    async def on_tool_list_changed(self, message: mcp_types.ToolListChangedNotification) -> None:
        self.seen.set()


async def test_an_agent_added_by_reload_is_announced_to_fleet_sessions(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} here")
    docs = fleet_manifests(fake_openai)
    path = manifest_file(tmp_path, docs)
    changed, base = ToolsChanged(), free_ports(4)
    async with pallas_run_reload(path, base) as run:
        await registry_up(base)
        async with Client(f"http://127.0.0.1:{base}/mcp", mode="legacy", message_handler=changed) as fleet:
            await ready_agents(fleet, 2)
            assert {t.name for t in await fleet.list_tools()} >= {"boss", "worker"}
            helper = {**docs[-1], "metadata": {"name": "helper"}}
            helper["spec"] = {**helper["spec"], "instruction": "helper", "description": "Helps out"}
            path.write_text(yaml.safe_dump_all([*docs, helper]))
            assert await run.line("out", "reloaded:") == "reloaded: started helper; unchanged worker, boss"
            # The same session (the registry was not restarted) is told, then lists the new tool.
            await asyncio.wait_for(changed.seen.wait(), 10)
            tools = {t.name: t for t in await fleet.list_tools()}
            assert tools["helper"].description == "Helps out"
            await ready_agents(fleet, 3)
            answer = await fleet.call_tool("helper", {"message": "hello"})
            assert answer.content[0].text == "helper here"


async def test_each_fleet_session_is_a_conversation_of_its_own_and_a_sessionless_call_keeps_none(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # The worker says how many user messages it has seen in its conversation.
    fake_openai.default = lambda request: Text(
        f"heard {sum(m['role'] == 'user' for m in request['messages'])}"
    )
    path = manifest_file(tmp_path, fleet_manifests(fake_openai))
    base = free_ports(3)
    async with pallas_run(path, base):
        await registry_up(base)
        url = f"http://127.0.0.1:{base}/mcp"
        async with Client(url, mode="legacy") as alice, Client(url, mode="legacy") as bob:
            await ready_agents(alice, 2)
            said = [
                (await fleet.call_tool("worker", {"message": "hi"})).content[0].text
                for fleet in (alice, alice, bob)
            ]
            # Alice's second message continues her conversation; Bob's first sees none of hers.
            assert said == ["heard 1", "heard 2", "heard 1"]
        async with Client(url) as sessionless:
            said = [
                (await sessionless.call_tool("worker", {"message": "hi"})).content[0].text for _ in range(2)
            ]
            assert said == ["heard 1", "heard 1"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_fleet_call_cancelled_by_its_client_cancels_the_agents_turn(
    fake_openai: FakeOpenAI, tmp_path: Path, mode: dict[str, Any]
) -> None:
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} here")
    base = free_ports(3)
    async with pallas_run(manifest_file(tmp_path, fleet_manifests(fake_openai)), base):
        await registry_up(base)
        async with Client(f"http://127.0.0.1:{base}/mcp", **mode) as fleet:
            await ready_agents(fleet, 2)
            fake_openai.script(Hold(asyncio.Event()))  # the worker's model never answers
            call = asyncio.create_task(fleet.call_tool("worker", {"message": "a long job"}))
            await asyncio.wait_for(fake_openai.held.wait(), 15)
            call.cancel()  # the client gives up: the fleet is told, and tells the worker
            with pytest.raises(asyncio.CancelledError):
                await call
            await until("the worker's model call to be abandoned", lambda: fake_openai.abandoned, 10)
            assert fake_openai.abandoned == 1, "the worker's turn went on after its caller cancelled"
            answer = await fleet.call_tool("worker", {"message": "still there?"})
            assert answer.content[0].text == "worker here"
