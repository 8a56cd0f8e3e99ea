"""`pallas run`'s registry: local agents over real MCP on loopback, served over real HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from fastmcp import Client, FastMCP

from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_registry.builder import VENDOR_META
from pallas_registry.schema import OFFICIAL_META
from pallas_registry.static import LocalAgent, StaticSource
from tests.support import waiting
from tests.support.mcp_servers import RunningServer, bound_socket, serve
from tests.support.registry import assert_valid_catalogue, running_registry

WELL_KNOWN = "/.well-known/mcp/server.json"
DEPLOYMENT = PallasDeploymentSpec.model_validate(
    {
        "model": {
            "default": "vllm.qwen3-8b",
            "capabilities": {"contextWindow": 200000, "maxOutputTokens": 32000},
        },
        "providers": {"vllm": {"type": "openai", "baseURL": "http://127.0.0.1:1/v1"}},
        "registry": {"namePrefix": "ca.helu.ouranos"},
    }
)


def stand_in_agent(name: str, health: dict[str, Any]) -> FastMCP:
    """An agent as clients see it: `send_message` and `get_health` (reporting `health` as it is now)."""
    mcp = FastMCP(name)

    @mcp.tool(output_schema=None)
    async def send_message(message: str) -> str:
        """Talk to the agent."""
        return f"{name} heard: {message}"

    @mcp.tool(output_schema=None)
    def get_health() -> str:
        """HealthView of this agent."""
        return json.dumps({"timestamp": "2026-11-21T10:00:00Z", **health})

    return mcp


def local_agent(name: str, url: str, **spec: Any) -> LocalAgent:
    agent_spec = PallasAgentSpec.model_validate({"deployment": "ouranos", "title": name.title(), **spec})
    return LocalAgent(name, agent_spec, DEPLOYMENT, url, "ouranos", "default")


async def catalogue(base: str, **params: str) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        response = await http.get(base + WELL_KNOWN, params=params)
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    assert_valid_catalogue(document)
    return document


async def until(check: Callable[[], Any], within: float = 10.0) -> Any:
    return await waiting.until("the registry's listing to change", check, within, interval=0.05)


def by_agent(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["server"]["name"].rpartition("/")[2]: entry for entry in document["servers"]}


@contextlib.asynccontextmanager
async def agents(*names: str) -> AsyncIterator[dict[str, tuple[RunningServer, dict[str, Any]]]]:
    async with contextlib.AsyncExitStack() as stack:
        running = {}
        for name in names:
            health: dict[str, Any] = {"status": "ok"}
            running[name] = (await stack.enter_async_context(serve(stand_in_agent(name, health))), health)
        yield running


async def test_a_client_reads_the_catalogue_and_talks_to_every_agent() -> None:
    async with agents("research", "coder") as running:
        source = StaticSource(
            [local_agent(n, srv.url, capabilities=[n]) for n, (srv, _) in running.items()],
            poll_interval=0.5,
            startup_interval=0.1,
            probe_timeout=3,
        )
        async with running_registry(source) as base:
            await source.wait_ready()
            document = await until(lambda: _listed(base, 2))
            assert sorted(by_agent(document)) == ["coder", "research"]
            for entry in document["servers"]:
                server = entry["server"]
                assert server["name"].startswith("ca.helu.ouranos/")
                assert server["capabilities"]["model"] == "qwen3-8b"
                assert entry["_meta"][VENDOR_META]["tools"] == ["get_health", "send_message"]
                remote = next(r for r in server["remotes"] if r["type"] == "streamable-http")
                async with Client(remote["url"]) as client:
                    tools = {tool.name for tool in await client.list_tools()}
                    assert {"send_message", "get_health"} <= tools
                    reply = await client.call_tool("send_message", {"message": "hello"})
                    agent = server["name"].rpartition("/")[2]
                    assert reply.content[0].text == f"{agent} heard: hello"
                    health = await client.call_tool("get_health", {})
                    assert json.loads(health.content[0].text)["status"] == "ok"


async def _listed(base: str, count: int, **params: str) -> dict[str, Any] | None:
    document = await catalogue(base, **params)
    return document if len(document["servers"]) == count else None


async def test_live_health_shows_in_meta_and_drives_ready_true() -> None:
    async with agents("research") as running:
        server, health = running["research"]
        source = StaticSource([local_agent("research", server.url)], poll_interval=0.1, probe_timeout=3)
        async with running_registry(source) as base:
            await source.wait_ready()
            await until(lambda: _listed(base, 1, ready="true"))

            health.update(status="degraded", message="argos unreachable")
            degraded = await until(lambda: _vendor_health(base, "degraded"))
            assert degraded["_meta"][OFFICIAL_META]["status"] == "active"
            assert degraded["_meta"][VENDOR_META]["health"]["message"] == "argos unreachable"

            # A missing key must not empty the catalogue: the agent stays, its health says why.
            health.update(status="error", message="no API key")
            await until(lambda: _listed(base, 0, ready="true"))
            unready = by_agent(await catalogue(base))["research"]
            assert unready == by_agent(await catalogue(base, include="all"))["research"]
            assert unready["_meta"][OFFICIAL_META]["status"] == "deprecated"
            assert (
                unready["_meta"][OFFICIAL_META]["statusMessage"] == "agent is Degraded, not ready: no API key"
            )
            assert unready["_meta"][VENDOR_META]["health"] == {
                "status": "error",
                "message": "no API key",
                "checkedAt": unready["_meta"][VENDOR_META]["health"]["checkedAt"],
            }

            health.update(status="ok", message="")
            await until(lambda: _listed(base, 1, ready="true"))


async def _vendor_health(base: str, status: str) -> dict[str, Any] | None:
    entry = by_agent(await catalogue(base)).get("research")
    return entry if entry and entry["_meta"][VENDOR_META]["health"]["status"] == status else None


async def test_agents_appear_when_they_come_up_and_fail_when_they_go() -> None:
    sock = bound_socket()
    port = sock.getsockname()[1]
    sock.close()
    agent = local_agent("late", f"http://127.0.0.1:{port}/mcp")
    source = StaticSource([agent], poll_interval=0.2, startup_interval=0.1, probe_timeout=1)
    async with running_registry(source) as base:
        await source.wait_ready()
        pending = by_agent(await catalogue(base))["late"]
        assert pending["_meta"][VENDOR_META]["phase"] == "Pending"
        assert (await catalogue(base, ready="true"))["servers"] == []
        async with serve(stand_in_agent("late", {"status": "ok"}), port=port):
            await until(lambda: _listed(base, 1, ready="true"))
        failed = await until(lambda: _phase(base, "Failed"))
        assert failed["_meta"][VENDOR_META]["health"]["message"].startswith("unreachable:")
        assert (await catalogue(base, ready="true"))["servers"] == []


async def _phase(base: str, phase: str) -> dict[str, Any] | None:
    entry = by_agent(await catalogue(base)).get("late")
    return entry if entry and entry["_meta"][VENDOR_META]["phase"] == phase else None


def test_a_taken_port_is_an_os_error_before_any_server_starts() -> None:
    from pallas_io.serving import listen

    holder = bound_socket()
    holder.listen()
    try:
        with pytest.raises(OSError, match="in use"):
            listen("127.0.0.1", holder.getsockname()[1])
    finally:
        holder.close()
