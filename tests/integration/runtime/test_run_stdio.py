"""`pallas run` hosts stdio MCP servers: server-everything over stdio, as a child behind a bridge.

The agent reaches the server over Streamable HTTP at the bridge's loopback URL; the server's
stderr lands in the run's log under its name; killing it gets it started again, and the next
call works. A stateful stdio server runs a process per conversation.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import yaml
from fastmcp import Client

from tests.integration.runtime.test_run_command import API_KEY, manifests, pallas_run
from tests.integration.runtime.test_run_reload import pallas_run_reload
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import McpPeers, free_ports
from tests.support.waiting import until

STDIO_SECRET = "stdio-secret-value-4711"


def stdio_manifests(llm: FakeOpenAI, peers: McpPeers, tmp: Path, **server: Any) -> list[dict[str, Any]]:
    """One deployment with server-everything as the stdio server `everything`, one agent using it."""
    secret, deployment, _, _ = manifests(llm)
    secret["data"]["TOKEN"] = base64.b64encode(STDIO_SECRET.encode()).decode()
    deployment["spec"]["mcpServers"] = {
        "everything": {
            "stdio": {
                "command": str(peers.node),
                "args": [str(peers.server_everything), "stdio"],
                "env": [
                    {"name": "HOME", "value": str(tmp)},
                    {
                        "name": "EVERYTHING_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "llm", "key": "TOKEN"}},
                    },
                ],
            },
            **server,
        }
    }
    agent = {
        "apiVersion": "pallas.dev/v1alpha1",
        "kind": "PallasAgent",
        "metadata": {"name": "worker"},
        "spec": {"deployment": "local", "instruction": "worker", "servers": ["everything"]},
    }
    return [secret, deployment, agent]


async def ask(port: int, **arguments: Any) -> str:
    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        result = await client.call_tool("send_message", {"message": "go", **arguments})
    return str(result.content[0].text)


def tool_results(llm: FakeOpenAI) -> list[str]:
    return [
        r.json["messages"][-1]["content"] for r in llm.completions if r.json["messages"][-1]["role"] == "tool"
    ]


def children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


async def bridge_ready(port: int) -> bool:
    async with httpx2.AsyncClient() as http:
        with contextlib.suppress(httpx2.HTTPError):
            return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
    return False


async def eventually(check: Any, what: str, within: float = 30) -> None:
    await until(what, check, within, interval=0.1)


async def test_a_stdio_server_runs_restarts_after_a_crash_and_logs_under_its_name(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers, tmp_path: Path
) -> None:
    fake_openai.script(
        ToolCalls([Call("everything__echo", {"message": "first"})]),
        Text("one"),
        ToolCalls([Call("everything__get-env", {})]),
        Text("two"),
        ToolCalls([Call("everything__echo", {"message": "after the crash"})]),
        Text("three"),
    )
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(stdio_manifests(fake_openai, mcp_peers, tmp_path)))
    base = free_ports(3)
    agent_port, bridge_port = base + 1, base + 2
    async with pallas_run(path, base) as proc:
        assert await ask(agent_port) == "one"
        assert await ask(agent_port) == "two"
        (server,) = children(proc.pid)
        os.kill(server, signal.SIGKILL)
        await eventually(lambda: _restarted(proc.pid, server, bridge_port), "server-everything started again")
        assert await ask(agent_port) == "three"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert f"stdio server everything{' ' * 7} http://127.0.0.1:{bridge_port}/mcp" in out.splitlines()
    echo, env, again = tool_results(fake_openai)
    assert echo == "Echo: first"
    assert again == "Echo: after the crash"
    seen_env = json.loads(env)
    # stdio.env, from the Secret: the child has the value, and the bridge redacts exactly that
    # value from what the tool returns (issue 46), so the caller sees the mark, never the value.
    assert seen_env["EVERYTHING_TOKEN"] == "[redacted]"
    assert STDIO_SECRET not in env
    assert API_KEY not in env  # the run's own secrets stay with the run
    assert not any(k.startswith("PALLAS_") for k in seen_env)
    lines = [json.loads(line) for line in err.splitlines()]
    stderr_lines = [line for line in lines if line.get("stream") == "stderr"]
    assert stderr_lines, "no stderr line of the server in the log"
    assert all(
        line["server"] == "everything" and line["message"].startswith("everything: ") for line in stderr_lines
    )
    assert any("Starting default (STDIO) server" in line["message"] for line in stderr_lines)
    lost = [line["message"] for line in lines if line["message"].startswith("everything: lost")]
    assert lost, "the crash was not logged"
    assert "killed by SIGKILL" in lost[0], lost
    bridge = [line["message"] for line in lines if line["logger"] == "pallas.stdio"]
    assert len([m for m in bridge if m.startswith("everything: connected")]) == 2  # started, restarted
    assert STDIO_SECRET not in err
    assert not children(proc.pid)


async def _restarted(pid: int, old: int, bridge_port: int) -> bool:
    now = children(pid)
    return bool(now) and old not in now and await bridge_ready(bridge_port)


async def test_a_stateful_stdio_server_runs_a_process_per_conversation(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers, tmp_path: Path
) -> None:
    fake_openai.script(
        *[
            step
            for _ in range(3)
            for step in (ToolCalls([Call("everything__echo", {"message": "x"})]), Text("ok"))
        ]
    )
    path = tmp_path / "agents.yaml"
    path.write_text(
        yaml.safe_dump_all(
            stdio_manifests(fake_openai, mcp_peers, tmp_path, stateful=True, sessions={"maxSessions": 2})
        )
    )
    base = free_ports(3)
    async with (
        pallas_run(path, base) as proc,
        Client(f"http://127.0.0.1:{base + 1}/mcp", mode="legacy") as client,
    ):
        listing = children(proc.pid)
        await client.call_tool("send_message", {"message": "go", "conversation_id": "a"})
        with_a = children(proc.pid)
        await client.call_tool("send_message", {"message": "go", "conversation_id": "b"})
        with_b = children(proc.pid)
        await client.call_tool("send_message", {"message": "go", "conversation_id": "a"})
        assert children(proc.pid) == with_b
        await client.call_tool("delete_conversation", {"conversation_id": "a"})
        await eventually(lambda: _count(proc.pid, len(with_b) - 1), "a's process stopped")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    results = tool_results(fake_openai)
    assert len(results) == 3
    assert all("Echo: x" in r for r in results), results  # every call was served
    assert not listing  # nothing runs before a session asks for it (a health probe does not)
    assert len(with_a) == 2  # the agent's session that lists the tools, and conversation a's
    assert len(with_b) == 3


async def _count(pid: int, expected: int) -> bool:
    return len(children(pid)) == expected


async def test_reload_restarts_a_changed_stdio_server_and_stops_a_removed_one(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers, tmp_path: Path
) -> None:
    fake_openai.default = lambda request: (
        Text(request["messages"][-1]["content"])
        if request["messages"][-1]["role"] == "tool"
        else ToolCalls([Call("everything__echo", {"message": "x"})])
    )
    docs = stdio_manifests(fake_openai, mcp_peers, tmp_path)
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    async with pallas_run_reload(path, base) as run:
        await run.line("out", "stdio server everything")
        first = children(run.proc.pid)
        assert await ask(base + 1) == "Echo: x"

        docs[1]["spec"]["mcpServers"]["everything"]["stdio"]["env"].append({"name": "MODE", "value": "two"})
        path.write_text(yaml.safe_dump_all(docs))
        assert (
            await run.line("out", "reloaded:")
            == "reloaded: restarted stdio server everything; unchanged worker"
        )
        await eventually(lambda: _replaced(run.proc.pid, first), "the changed server started anew")
        assert await ask(base + 1) == "Echo: x"  # on the port it had

        docs[2]["spec"]["servers"] = []
        mark = len(run.out)
        path.write_text(yaml.safe_dump_all(docs))
        assert await run.line("out", "reloaded:", after=mark) == (
            "reloaded: stopped stdio server everything; applied in place worker"
        )
        await eventually(lambda: _count(run.proc.pid, 0), "the server no agent uses stopped")


async def _replaced(pid: int, before: set[int]) -> bool:
    now = children(pid)
    return bool(now) and not now & before
