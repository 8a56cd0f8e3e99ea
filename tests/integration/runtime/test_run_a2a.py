"""A2A under `pallas run -f`: an orchestrator called with the a2a-sdk client delegates to a Pallas
worker (MCP) and to an A2A agent built with the a2a-sdk server; the registry names every agent's
card and serves all of them at one URL."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx2
import yaml

from tests.integration.runtime.test_run_command import manifests, pallas_run, registry_listing
from tests.support.a2a_agents import echo_a2a_agent
from tests.support.a2a_clients import a2a_client, stream_events, text_request
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import free_ports

ASK_WORKER = Call("worker__send_message", {"message": "6*7?"})
ASK_ECHO = Call("echo__send_message", {"message": "hi"})
ECHO_KEY = {"name": "llm", "key": "ECHO"}
VENDOR = "dev.pallas/agent"


async def registry_up(base: int) -> None:
    """Wait until the run's registry answers (it starts after the agents)."""
    async with httpx2.AsyncClient() as http:
        for _ in range(200):
            with contextlib.suppress(httpx2.HTTPError):
                if (await http.get(f"http://127.0.0.1:{base}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("the registry never answered")


async def test_an_a2a_caller_reaches_the_whole_run_and_the_registry_lists_the_cards(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    def step(request_json: dict[str, Any]) -> Any:
        system = request_json["messages"][0]["content"]
        results = [m["content"] for m in request_json["messages"] if m["role"] == "tool"]
        if system == "worker":
            return Text("42")
        if not results:
            return ToolCalls(
                [
                    Call("worker__send_message", {"message": "6*7?"}),
                    Call("echo__send_message", {"message": "hi"}),
                ]
            )
        return Text(" | ".join(str(r) for r in results))

    fake_openai.default = step
    async with echo_a2a_agent(require_key="echo-key") as echo:
        docs = manifests(fake_openai)
        docs[0]["stringData"] = {"ECHO": "echo-key"}
        docs[1]["spec"]["a2aAgents"] = {
            "echo": {
                "url": echo.url,
                "headers": [
                    {"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "ECHO"}}}
                ],
            }
        }
        docs[2]["spec"]["a2aAgents"] = ["echo"]
        path = tmp_path / "agents.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        base = free_ports(3)
        async with pallas_run(path, base):
            await registry_up(base)
            await registry_listing(base)
            boss = f"http://127.0.0.1:{base + 1}"
            async with a2a_client(boss, streaming=True) as client:
                events = await stream_events(client, text_request("ask both"))
            async with httpx2.AsyncClient() as http:
                listing = (await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/server.json")).json()
                cards = (await http.get(f"http://127.0.0.1:{base}/a2a/agent-cards")).json()
    final = events[-1].status_update
    assert final.status.state == 3  # TASK_STATE_COMPLETED
    answers = [
        e.artifact_update for e in events if e.HasField("artifact_update") and e.artifact_update.last_chunk
    ]
    assert answers[-1].artifact.parts[0].text == "42 | echo: hi"
    assert echo.received[0].headers["x-api-key"] == "echo-key"
    assert echo.received[0].metadata["pallas.dev/callPath"] == ["boss"]
    a2a_meta = {
        e["server"]["name"].rsplit("/", 1)[1]: e["_meta"]["dev.pallas/agent"]["a2a"]
        for e in listing["servers"]
    }
    assert a2a_meta["boss"] == {
        "agentCard": f"{boss}/.well-known/agent-card.json",
        "url": f"{boss}/a2a",
    }
    by_name = {a["name"].rsplit("/", 1)[1]: a for a in cards["agents"]}
    assert sorted(by_name) == ["boss", "worker"]
    assert by_name["boss"]["card"]["supportedInterfaces"][0]["url"] == f"{boss}/a2a"
    assert by_name["worker"]["card"]["name"] == "worker"
