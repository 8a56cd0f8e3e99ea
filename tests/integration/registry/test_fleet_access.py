"""The fleet endpoint's access control under `pallas run`: the agents' own rules, checked at `/mcp`.

The deployment authenticates with OIDC (a real local issuer); the worker admits only the
`research` group, the boss every authenticated caller. alice (research) sees and reaches both,
eve (sales) only the boss: the worker is not in her `tools/list` nor `list_agents`, and calling
its tool anyway is refused before the worker is asked. Without a bearer (or with a forged one)
the endpoint answers 401, as the agents do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError

from tests.integration.registry.test_fleet import MODES, fleet_manifests, manifest_file, ready_agents
from tests.integration.runtime.test_run_command import pallas_run, registry_up
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.mcp_peers import free_ports
from tests.support.oidc import AUDIENCE, oidc_issuer

MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
QUIET = {"PALLAS_LOG_LEVEL": "INFO", "PALLAS_ROOT_LOG_LEVEL": "WARNING"}
"""Nothing reads `pallas run`'s pipes until the end: debug lines of the polling registry would fill them."""


def fleet(base: int, token: str, mode: dict[str, Any]) -> Client[Any]:
    transport = StreamableHttpTransport(
        f"http://127.0.0.1:{base}/mcp", headers={"Authorization": f"Bearer {token}"}
    )
    return Client(transport, **mode)


@pytest.mark.parametrize("mode", MODES)
async def test_the_fleet_shows_and_relays_only_the_agents_a_caller_may_invoke(
    fake_openai: FakeOpenAI, tmp_path: Path, mode: dict[str, Any]
) -> None:
    fake_openai.default = lambda request: Text(f"{request['messages'][0]['content']} here")
    async with oidc_issuer() as issuer:
        docs = fleet_manifests(fake_openai)
        docs[1]["spec"]["auth"] = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
        docs[3]["spec"]["access"] = {"groups": ["research"]}  # the worker: researchers only
        base = free_ports(3)
        alice, eve = issuer.token(sub="alice"), issuer.token(sub="eve", groups=["sales"])
        async with pallas_run(manifest_file(tmp_path, docs), base, env={"PALLAS_TOKEN": alice, **QUIET}) as proc:
            await registry_up(base)
            await _door(base, alice, issuer.unsigned_token())

            async with fleet(base, alice, mode) as client:
                assert [a["name"] for a in await ready_agents(client, 2)] == ["boss", "worker"]
                assert {"boss", "worker"} <= {t.name for t in await client.list_tools()}
                answer = await client.call_tool("worker", {"message": "hello"})
                assert answer.content[0].text == "worker here"  # alice's bearer reached the worker

            asked = len(fake_openai.completions)
            async with fleet(base, eve, mode) as client:
                assert [a["name"] for a in await ready_agents(client, 1)] == ["boss"]
                tools = {t.name for t in await client.list_tools()}
                assert tools == {"list_agents", "get_agent_health", "registry_health", "boss"}
                with pytest.raises(ToolError, match="no agent 'worker'"):
                    await client.call_tool("get_agent_health", {"agent": "worker"})
                refused = await client.call_tool("worker", {"message": "hello"}, raise_on_error=False)
                assert refused.is_error
                assert "you may not invoke agent worker" in refused.content[0].text
                assert refused.structured_content["error"]["code"] == "DENIED_BY_POLICY"
                assert len(fake_openai.completions) == asked  # the worker was never asked
                answer = await client.call_tool("boss", {"message": "hello"})
                assert answer.content[0].text == "boss here"
                health = json.loads((await client.call_tool("get_agent_health", {"agent": "boss"})).content[0].text)
                assert health["name"] == "boss"
            proc.terminate()
            _, err = proc.communicate(timeout=15)
    assert alice not in err
    assert eve not in err


async def _door(base: int, alice: str, forged: str) -> None:
    """Without a bearer, with a forged one, or with two: refused before any MCP is spoken."""
    url = f"http://127.0.0.1:{base}/mcp"
    async with httpx2.AsyncClient() as http:
        bare = await http.post(url, json=PING, headers=MCP_ACCEPT)
        assert bare.status_code == 401
        assert bare.headers["www-authenticate"].startswith("Bearer ")
        assert bare.json()["error"] == "unauthorized"
        bad = await http.post(url, json=PING, headers={**MCP_ACCEPT, "Authorization": f"Bearer {forged}"})
        assert bad.status_code == 401
        assert 'error="invalid_token"' in bad.headers["www-authenticate"]
        two = await http.post(
            url,
            json=PING,
            headers=[*MCP_ACCEPT.items(), ("Authorization", f"Bearer {alice}"), ("Authorization", "Bearer x")],
        )
        assert two.status_code == 400
