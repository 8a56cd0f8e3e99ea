"""A hosted stdio server's bridge answers its deployment's agents only (issue 46).

The bridge (`pallas bridge`, the pod's `bridge` container, or `pallas run`'s) answered anyone who
reached it: no auth, access list, approval, audit or budget applies there, so a tool an agent
calls only after approval, or one returning a Secret-backed value, was anyone's for the asking.
Now every request but the probes must carry the deployment's bridge credential
(`Pallas-Bridge-Token`), which the deployment's agents send; a request without it, or with
another value, gets 401 before it reaches the server. The credential appears in no log line and
not in the agent's `get_health`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from pallas_api import names
from pallas_api.render import render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from tests.integration.runtime.test_bridge import PALLAS, SERVING, process
from tests.integration.runtime.test_run_command import manifests, pallas_run
from tests.support.agents import QUIET_FASTMCP_ENV, run_agent_process
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_peers import free_ports
from tests.support.mcp_servers import INITIALIZE
from tests.support.ports import logged_port

CREDENTIAL = "bridge-credential-7d41c09e5b2f"
SERVER = """
from fastmcp import FastMCP

mcp = FastMCP("vault")


@mcp.tool
def read_vault() -> str:
    return "the vault says 42"


mcp.run(show_banner=False)
"""
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def vault_server() -> dict[str, Any]:
    """The deployment's `mcpServers.vault`: the Python server above, over stdio."""
    env = [{"name": k, "value": v} for k, v in QUIET_FASTMCP_ENV.items()]
    return {"stdio": {"command": sys.executable, "args": ["-c", SERVER], "env": env}}


def tool_messages(llm: FakeOpenAI) -> list[str]:
    """The tool results the agent handed the model."""
    return [
        r.json["messages"][-1]["content"] for r in llm.completions if r.json["messages"][-1]["role"] == "tool"
    ]


async def refusals(port: int) -> list[int]:
    """What the bridge answers an MCP request without the credential, with a wrong one, with two."""
    url = f"http://127.0.0.1:{port}/mcp"
    header = names.BRIDGE_TOKEN_HEADER
    async with httpx2.AsyncClient() as http:
        without = await http.post(url, json=INITIALIZE, headers=MCP_HEADERS)
        wrong = await http.post(url, json=INITIALIZE, headers={**MCP_HEADERS, header: "guess"})
        listing = await http.get(url, headers={"Accept": "text/event-stream"})
        assert "read_vault" not in without.text
        assert without.json()["error"] == "unauthorized", without.text
        # The probes stay open to the kubelet (ready or not: never refused).
        assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
        assert (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code in (200, 503)
    return [without.status_code, wrong.status_code, listing.status_code]


async def test_the_bridge_serves_only_the_agents_sending_the_deployments_credential(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """`pallas bridge` (the pod's bridge) with the credential; a real `pallas agent` calls through it."""
    fake_openai.script(ToolCalls([Call("vault__read_vault", {})]), Text("done"))
    log = tmp_path / "bridge.log"
    env = {**os.environ, **QUIET_FASTMCP_ENV, "PALLAS_LOG_LEVEL": "DEBUG", names.BRIDGE_TOKEN_ENV: CREDENTIAL}
    argv = [*PALLAS, "bridge", "--name", "vault", "--port", "0", "--host", "127.0.0.1"]
    with process([*argv, "--", sys.executable, "-c", SERVER], log, env) as bridge:
        port = logged_port(log, SERVING, alive=bridge.poll)
        assert await refusals(port) == [401, 401, 401]
        transport = StreamableHttpTransport(f"http://127.0.0.1:{port}/mcp")
        with pytest.raises(Exception, match="error response"):
            async with Client(transport, mode="legacy") as intruder:
                await intruder.call_tool("read_vault", {})

        # The agent's config as the renderer writes it: the header from PALLAS_BRIDGE_TOKEN.
        deployment = PallasDeploymentSpec.model_validate(
            {
                "model": {"default": f"fake.{fake_openai.models[0]}"},
                "providers": {"fake": {"type": "openai", "baseURL": fake_openai.base_url}},
                "mcpServers": {"vault": vault_server()},
            }
        )
        agent = PallasAgentSpec.model_validate({"deployment": "d", "instruction": "x", "servers": ["vault"]})
        rendered = render_agent(
            "a", agent, deployment, {}, local=True, stdio_urls={"vault": f"http://127.0.0.1:{port}/mcp"}
        )
        agent_env = {"PALLAS_LOG_LEVEL": "DEBUG", "PALLAS_ROOT_LOG_LEVEL": "DEBUG"}
        agent_env[names.BRIDGE_TOKEN_ENV] = CREDENTIAL
        async with (
            run_agent_process(rendered.config, env=agent_env) as running,
            Client(running.url, mode="legacy") as client,
        ):
            answer = await client.call_tool("send_message", {"message": "go"})
            health = await client.call_tool("get_health", {})
            agent_log = running.stderr()
        health_text = json.dumps(health.structured_content) + str(health.content)
    assert str(answer.content[0].text) == "done"  # type: ignore[union-attr]
    assert tool_messages(fake_openai) == ["the vault says 42"]  # through the bridge, credential and all
    assert CREDENTIAL not in health_text
    assert CREDENTIAL not in agent_log
    assert CREDENTIAL not in log.read_text()
    assert "refused a request to /mcp" in log.read_text()


async def test_pallas_run_gives_its_agents_and_bridges_a_credential_no_one_else_has(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script(ToolCalls([Call("vault__read_vault", {})]), Text("done"))
    secret, deployment, _, _ = manifests(fake_openai)
    deployment["spec"]["mcpServers"] = {"vault": vault_server()}
    agent = {
        "apiVersion": "pallas.dev/v1alpha1",
        "kind": "PallasAgent",
        "metadata": {"name": "worker"},
        "spec": {"deployment": "local", "instruction": "worker", "servers": ["vault"]},
    }
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all([secret, deployment, agent]))
    base = free_ports(3)
    agent_port, bridge_port = base + 1, base + 2
    async with pallas_run(path, base) as proc:
        async with Client(f"http://127.0.0.1:{agent_port}/mcp") as client:
            answer = await client.call_tool("send_message", {"message": "go"})
        assert await refusals(bridge_port) == [401, 401, 401]
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert str(answer.content[0].text) == "done"  # type: ignore[union-attr]
    assert tool_messages(fake_openai) == ["the vault says 42"]
    assert "refused a request to /mcp" in err
