"""`pallas agent` takes a rotated key and an edited config while it runs, between turns.

The agent runs as a process, as in a pod: its config file and its `--secrets-dir` are folders
laid out and updated the way the kubelet updates ConfigMap and Secret volumes (`..data` swapped
in one rename; `tests.support.volumes`). A turn is held at the fake LLM while the test edits,
so the edit lands in the middle of it: the turn finishes on what it started with, and the next
one runs on the new key or config, in the same process and the same MCP session.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api.config import AgentConfig, parse_config, render_config
from pallas_api.live import config_digest
from tests.support.agents import AgentProcess, run_agent_process
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.volumes import KubeletVolume

KEY_NAME = "PALLAS_PROVIDER_FAKE_API_KEY"


def agent_config(llm: FakeOpenAI, instruction: str, **fields: Any) -> AgentConfig:
    return parse_config(
        {
            "name": "solo",
            "model": llm.models[0],
            "instruction": instruction,
            "provider": {
                "name": "fake",
                "type": "openai",
                "baseURL": llm.base_url,
                "apiKeyEnv": KEY_NAME,
                "apiKeySource": "Secret llm key KEY",
            },
            **fields,
        }
    )


def config_volume(tmp_path: Path, config: AgentConfig) -> KubeletVolume:
    """The agent's ConfigMap volume holding `config` as the operator renders it."""
    return KubeletVolume(tmp_path / "config", {"agent.yaml": render_config(config)})


@asynccontextmanager
async def agent_pod(
    config: KubeletVolume, secrets: KubeletVolume
) -> AsyncIterator[tuple[AgentProcess, Client[Any]]]:
    """`pallas agent` over the two volumes, as an agent pod runs it, and an MCP session to it."""
    args = ["--secrets-dir", str(secrets.folder)]
    async with (
        run_agent_process(config.folder / "agent.yaml", extra_args=args) as process,
        Client(StreamableHttpTransport(process.url), mode="legacy") as session,
    ):
        yield process, session


async def health_of(url: str) -> dict[str, Any]:
    async with Client(StreamableHttpTransport(url), mode="legacy") as client:
        result = await client.call_tool("get_health", {})
    report: dict[str, Any] = json.loads(result.content[0].text)
    return report


def text(result: Any) -> str:
    return str(result.content[0].text)


async def test_a_key_rotated_during_a_turn_is_sent_from_the_next_call_and_the_turn_finishes(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("first answer")), Text("second answer"))
    config = KubeletVolume(
        tmp_path / "config", {"agent.yaml": render_config(agent_config(fake_openai, "hi"))}
    )
    secrets = KubeletVolume(tmp_path / "secrets", {KEY_NAME: "sk-before-rotation-1"})
    async with agent_pod(config, secrets) as (agent, session):
        turn = asyncio.create_task(session.call_tool("send_message", {"message": "one"}))
        await fake_openai.held.wait()  # the turn's LLM call is in flight
        secrets.write({KEY_NAME: "sk-after-rotation-2"})
        release.set()
        assert text(await turn) == "first answer"
        assert text(await session.call_tool("send_message", {"message": "two"})) == "second answer"
        assert (await health_of(agent.url))["status"] == "ok"
        assert "sk-before-rotation-1" not in agent.stderr()
        assert "sk-after-rotation-2" not in agent.stderr()
    sent = [request.headers.get("authorization") for request in fake_openai.completions]
    assert sent == ["Bearer sk-before-rotation-1", "Bearer sk-after-rotation-2"]


async def test_a_deleted_key_makes_health_name_the_secret_and_its_return_heals_it(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    config = KubeletVolume(
        tmp_path / "config", {"agent.yaml": render_config(agent_config(fake_openai, "hi"))}
    )
    secrets = KubeletVolume(tmp_path / "secrets", {})
    async with agent_pod(config, secrets) as (agent, session):
        report = await health_of(agent.url)
        assert (report["status"], report["missingSecrets"]) == ("error", ["Secret llm key KEY"])
        assert "no API key: Secret llm key KEY is not set" in report["message"]
        secrets.write({KEY_NAME: "sk-arrived-late-3"})  # the Secret was created; no restart
        assert "missingSecrets" not in await health_of(agent.url)
        assert text(await session.call_tool("send_message", {"message": "now?"}))
    assert fake_openai.completions[-1].headers.get("authorization") == "Bearer sk-arrived-late-3"


async def test_a_config_edited_during_a_turn_serves_the_next_turn_and_the_turn_ends_on_the_old(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("old answer")))
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} answers")
    old = render_config(agent_config(fake_openai, "old instruction"))
    new = render_config(agent_config(fake_openai, "new instruction", maxIterations=3))
    config = KubeletVolume(tmp_path / "config", {"agent.yaml": old})
    secrets = KubeletVolume(tmp_path / "secrets", {KEY_NAME: "sk-config-test-4"})
    async with agent_pod(config, secrets) as (agent, session):
        assert (await health_of(agent.url))["configHash"] == config_digest(old)
        turn = asyncio.create_task(session.call_tool("send_message", {"message": "one"}))
        await fake_openai.held.wait()
        config.write({"agent.yaml": new})
        # Health looks at the file first: it reports the new config while the turn still runs.
        assert (await health_of(agent.url))["configHash"] == config_digest(new)
        release.set()
        assert text(await turn) == "old answer"
        assert text(await session.call_tool("send_message", {"message": "two"})) == "new instruction answers"
        instruction = await session.read_resource("pallas://instruction")
        assert instruction[0].text == "new instruction"  # type: ignore[union-attr]

        # What needs a new process is not taken: the agent serves the config it has and says so.
        restart = render_config(agent_config(fake_openai, "newer", history={"maxMessages": 5}))
        config.write({"agent.yaml": restart})
        assert (await health_of(agent.url))["configHash"] == config_digest(new)
        assert "needs a new process" in agent.stderr()
        assert (
            text(await session.call_tool("send_message", {"message": "three"})) == "new instruction answers"
        )
    systems = [request.json["messages"][0]["content"] for request in fake_openai.completions]
    assert systems == ["old instruction", "new instruction", "new instruction"]
