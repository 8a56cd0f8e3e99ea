"""The fleet's agent tools as MCP tasks (`io.modelcontextprotocol/tasks`): issue 51, item 2.

`pallas run` hosts boss and worker on the scripted fake OpenAI server and the registry on the base
port; fastmcp's Client with the tasks extension (`commands.chat.tasks.TasksClient`) calls the
worker's tool on the registry's `/mcp`. The call is relayed as a task of the worker: its id names
the agent (`worker.<id>`), it outlives the fleet client's connections, the worker itself knows
it by the rest of the id, and `tasks/get`, `tasks/update` (an approval's answer) and
`tasks/cancel` work through the fleet; under OIDC the fleet's access rules hold for tasks too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError

from pallas_runtime.commands.chat.tasks import TaskHandle, TasksClient, cancel, get, outcome, poll
from tests.integration.registry.test_fleet import fleet_manifests, manifest_file, ready_agents
from tests.integration.registry.test_fleet_access import QUIET
from tests.integration.runtime.test_approvals import ops_mcp, script
from tests.integration.runtime.test_run_command import pallas_run, registry_up
from tests.integration.runtime.test_tasks import answer_the_approval
from tests.support.fake_llm import Call, Delay, FakeOpenAI, Hold, Text
from tests.support.mcp_peers import free_ports
from tests.support.mcp_servers import serve
from tests.support.oidc import AUDIENCE, oidc_issuer
from tests.support.waiting import until

WORKER_SAYS = "Six times seven is forty-two."


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client[Any]]:
    """A fresh 2026-07-28 connection that speaks the tasks extension."""
    async with Client(url, extensions=[TasksClient()]) as client:
        yield client


@contextlib.asynccontextmanager
async def fleet_up(fake_openai: FakeOpenAI, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """`pallas run` with both agents ready: the fleet's URL and the worker's."""
    path = manifest_file(tmp_path, fleet_manifests(fake_openai))
    base = free_ports(3)
    async with pallas_run(path, base):
        await registry_up(base)
        fleet_url = f"http://127.0.0.1:{base}/mcp"
        async with connected(fleet_url) as fleet:
            await ready_agents(fleet, 2)
        yield fleet_url, f"http://127.0.0.1:{base + 2}/mcp"


def worker_turns(fake_openai: FakeOpenAI) -> int:
    return sum(1 for c in fake_openai.completions if c.json["messages"][0]["content"] == "worker")


async def test_a_fleet_call_as_a_task_outlives_its_connections_and_is_the_agents_own_task(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = lambda request: Delay(3.0, Text(WORKER_SAYS))
    async with fleet_up(fake_openai, tmp_path) as (fleet_url, worker_url):
        async with connected(fleet_url) as fleet:
            handle = await fleet.session.call_tool("worker", {"message": "6*7?"}, allow_claimed=True)
        assert isinstance(handle, TaskHandle), handle
        assert handle.status == "working"
        agent, _, own_id = handle.task_id.partition(".")
        assert agent == "worker"
        await asyncio.sleep(0.5)
        async with connected(fleet_url) as fleet:  # the first connection is gone: a new one
            state = await get(fleet.session, handle.task_id)
        assert (state.status, state.task_id) == ("working", handle.task_id)
        async with connected(fleet_url) as fleet:  # cut again; the third polls to the end
            final = await poll(fleet.session, handle.task_id)
        assert final.status == "completed"
        assert outcome(final).content[0].text == WORKER_SAYS  # type: ignore[union-attr]
        async with connected(worker_url) as direct:  # the task is the worker's, kept by the worker
            kept = await get(direct.session, own_id)
        assert (kept.status, kept.task_id) == ("completed", own_id)
        assert worker_turns(fake_openai) == 1  # the turn ran once: nothing was sent again

        async with connected(fleet_url) as fleet:  # fastmcp's client follows the task by itself
            result = await fleet.call_tool("worker", {"message": "again"})
        async with Client(fleet_url) as in_place:  # without the extension: answered in place
            direct = await in_place.call_tool_mcp("worker", {"message": "once more"})
    assert result.content[0].text == WORKER_SAYS  # type: ignore[union-attr]
    assert direct.content[0].text == WORKER_SAYS  # type: ignore[union-attr]


async def test_tasks_cancel_through_the_fleet_stops_the_agents_turn(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    async with fleet_up(fake_openai, tmp_path) as (fleet_url, _), connected(fleet_url) as fleet:
        fake_openai.script(Hold(release, Text("never seen")))  # the worker's model call
        handle = await fleet.session.call_tool("worker", {"message": "wait"}, allow_claimed=True)
        assert isinstance(handle, TaskHandle), handle
        await fake_openai.holding_at_least(1)
        await cancel(fleet.session, handle.task_id)
        state = await get(fleet.session, handle.task_id)
        assert state.status == "cancelled"
        # The worker's model call was closed (the fake answers it 499): its turn itself stopped.
        await until("the worker's model call is closed", lambda: fake_openai.holding == 0, 10)
        release.set()


async def test_an_unknown_task_through_the_fleet_is_named(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with fleet_up(fake_openai, tmp_path) as (fleet_url, _), connected(fleet_url) as fleet:
        for task_id in ("worker.nope", "nobody.abc", "no-agent-named"):
            with pytest.raises(MCPError, match=f"no task '{task_id}' of this caller"):
                await get(fleet.session, task_id)


async def test_a_fleet_task_is_its_callers_alone_and_the_fleets_access_rules_hold_for_tasks(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """OIDC: the worker admits researchers only. alice (research) starts tasks of the worker and the
    boss; eve (sales) may invoke the boss alone: she cannot start a worker task, and neither of
    alice's tasks is hers to read (the worker's by the fleet's rules, the boss's by the owner)."""
    fake_openai.default = lambda request: Delay(1.0, Text(f"{request['messages'][0]['content']} here"))
    async with oidc_issuer() as issuer:
        docs = fleet_manifests(fake_openai)
        docs[1]["spec"]["auth"] = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
        docs[3]["spec"]["access"] = {"groups": ["research"]}
        base = free_ports(3)
        alice, eve = issuer.token(sub="alice"), issuer.token(sub="eve", groups=["sales"])
        path = manifest_file(tmp_path, docs)
        async with pallas_run(path, base, env={"PALLAS_TOKEN": alice, **QUIET}):
            await registry_up(base)
            async with as_caller(base, alice) as client:
                await ready_agents(client, 2)
                started = [
                    await client.session.call_tool(agent, {"message": "hi"}, allow_claimed=True)
                    for agent in ("worker", "boss")
                ]
                worker_task, boss_task = (h.task_id for h in started if isinstance(h, TaskHandle))
            async with as_caller(base, eve) as client:
                refused = await client.session.call_tool("worker", {"message": "hi"}, allow_claimed=True)
                assert isinstance(refused, mcp_types.CallToolResult)
                assert refused.is_error
                assert "you may not invoke agent worker" in refused.content[0].text  # type: ignore[union-attr]
                for task_id in (worker_task, boss_task):
                    with pytest.raises(MCPError, match=r"no task .* of this caller"):
                        await get(client.session, task_id)
            async with as_caller(base, alice) as client:
                finals = [await poll(client.session, task_id) for task_id in (worker_task, boss_task)]
    assert [outcome(f).content[0].text for f in finals] == ["worker here", "boss here"]  # type: ignore[union-attr]
    assert worker_turns(fake_openai) == 1  # eve's refused call never reached the worker


def as_caller(base: int, token: str) -> Client[Any]:
    transport = StreamableHttpTransport(
        f"http://127.0.0.1:{base}/mcp", headers={"Authorization": f"Bearer {token}"}
    )
    return Client(transport, extensions=[TasksClient()])


async def test_an_agents_approval_question_comes_through_the_fleets_task_and_its_answer_goes_back(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The worker's call of ops/delete_file needs approval: the fleet's `tasks/get` shows the
    question (`input_required`), the fleet's `tasks/update` answers it, the tool runs once."""
    ran: list[str] = []
    fake_openai.default = script([Call("ops__delete_file", {"path": "/tmp/t"})])
    async with serve(ops_mcp(ran)) as ops:
        docs = fleet_manifests(fake_openai)
        docs[1]["spec"]["mcpServers"] = {"ops": {"url": ops.url, "requireApproval": {"tools": ["delete_*"]}}}
        docs[3]["spec"]["servers"] = ["ops"]
        base = free_ports(3)
        async with pallas_run(manifest_file(tmp_path, docs), base):
            await registry_up(base)
            async with connected(f"http://127.0.0.1:{base}/mcp") as fleet:
                await ready_agents(fleet, 2)
                handle = await fleet.session.call_tool("worker", {"message": "clean up"}, allow_claimed=True)
                assert isinstance(handle, TaskHandle), handle
                final, asked = await answer_the_approval(fleet.session, handle.task_id, ran)
    assert outcome(final).content[0].text == "worker got: deleted /tmp/t"  # type: ignore[union-attr]
    assert ran == ["delete_file /tmp/t"]
    assert len(asked) == 1
