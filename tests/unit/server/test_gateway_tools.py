"""The gateway tools on the agent's own MCP surface (`toolExposure.gateway`), driven in memory.

A client uses the agent as a policy-enforcing gateway: the same policy, audit lines, metrics and
error codes as the model's calls, results passed on with their images and `isError`.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types
import pytest

from pallas_runtime.downstream.content import parts_from_result
from pallas_runtime.downstream.source import ProgressHandler, ToolOutcome
from pallas_runtime.messages import ImagePart, TextPart
from tests.unit.agent.doubles import FakeSource
from tests.unit.server.test_surface import PNG, error_of, in_memory

GATEWAY = {"list_servers", "get_server_tools", "execute_tool"}


async def test_the_gateway_tools_are_offered_only_when_the_spec_enables_them() -> None:
    async with in_memory(sources=[FakeSource("argos", ["search"])]) as agent:
        assert not GATEWAY & {t.name for t in await agent.client.list_tools()}
    async with in_memory(sources=[FakeSource("argos", ["search"])], toolExposure={"gateway": True}) as agent:
        tools = {t.name: t for t in await agent.client.list_tools()}
    assert set(tools) >= GATEWAY
    assert tools["list_servers"].annotations.read_only_hint
    assert tools["execute_tool"].input_schema["required"] == ["server", "tool"]


async def test_a_client_lists_finds_and_calls_a_tool_through_the_agent() -> None:
    argos = FakeSource("argos", [f"t{i:03d}" for i in range(120)])
    async with in_memory(sources=[argos], toolExposure={"gateway": True}) as agent:
        listed = await agent.client.call_tool("list_servers", {})
        found = await agent.client.call_tool("get_server_tools", {"server": "argos", "names": ["t117"]})
        called = await agent.client.call_tool(
            "execute_tool", {"server": "argos", "tool": "t117", "args": {"q": "x"}}
        )
        count = agent.count(
            "pallas_tool_calls_total", agent="harper", server="argos", operation="tool", outcome="ok"
        )
    (server,) = listed.structured_content["servers"]
    assert (server["name"], server["toolCount"], server["tools"][-1]) == ("argos", 120, "t119")
    assert [t["name"] for t in found.structured_content["tools"]] == ["t117"]
    assert not called.is_error
    assert called.content[0].text == "t117:[('q', 'x')]:None"
    assert argos.calls == [("t117", {"q": "x"}, None)]
    assert count == 1


async def test_execute_tool_keeps_images_and_is_error_of_the_downstream_result() -> None:
    async def snap(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> ToolOutcome:
        return ToolOutcome((TextPart("blurry"), ImagePart(PNG, "image/png")), is_error=True)

    async with in_memory(
        sources=[FakeSource("cam", ["snap"], handler=snap)], toolExposure={"gateway": True}
    ) as agent:
        result = await agent.client.call_tool(
            "execute_tool", {"server": "cam", "tool": "snap"}, raise_on_error=False
        )
    assert result.is_error
    text, image = result.content
    assert (text.type, text.text) == ("text", "blurry")
    assert (image.type, image.data, image.mime_type) == ("image", PNG, "image/png")


async def test_execute_tool_passes_audio_blobs_links_and_structured_content_untouched() -> None:
    """Seed 003: a gateway does not modify tool responses (the model gets text notes of them)."""
    blocks = (
        mcp_types.TextContent(type="text", text="three things"),
        mcp_types.AudioContent(type="audio", data="UklGRg==", mime_type="audio/wav"),
        mcp_types.EmbeddedResource(
            type="resource",
            resource=mcp_types.BlobResourceContents(uri="file:///a.bin", blob="AAEC", mime_type="text/x"),
        ),
        mcp_types.ResourceLink(type="resource_link", uri="file:///report.pdf", name="report"),
    )
    served = mcp_types.CallToolResult(content=list(blocks), structured_content={"count": 3})

    async def rich(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> ToolOutcome:
        parts = parts_from_result(served)
        return ToolOutcome(parts, blocks=blocks, structured=served.structured_content)

    async with in_memory(
        sources=[FakeSource("media", ["fetch"], handler=rich)], toolExposure={"gateway": True}
    ) as agent:
        result = await agent.client.call_tool("execute_tool", {"server": "media", "tool": "fetch"})
    text, audio, blob, link = result.content
    assert text.text == "three things"
    assert (audio.type, audio.data, audio.mime_type) == ("audio", "UklGRg==", "audio/wav")
    assert (blob.type, blob.resource.blob, str(blob.resource.uri)) == ("resource", "AAEC", "file:///a.bin")
    assert (link.type, str(link.uri), link.name) == ("resource_link", "file:///report.pdf", "report")
    assert result.structured_content == {"count": 3}


async def test_the_policy_applies_to_clients_as_to_the_model(caplog: pytest.LogCaptureFixture) -> None:
    argos = FakeSource("argos", ["search", "delete_index"])
    async with in_memory(
        sources=[argos], tools={"deny": ["argos__delete_*"]}, toolExposure={"gateway": True}
    ) as agent:
        listed = await agent.client.call_tool("list_servers", {})
        with caplog.at_level(logging.INFO, logger="pallas.audit"):
            denied = await agent.client.call_tool(
                "execute_tool", {"server": "argos", "tool": "delete_index"}, raise_on_error=False
            )
        unknown = await agent.client.call_tool(
            "execute_tool", {"server": "nowhere", "tool": "x"}, raise_on_error=False
        )
        denials = agent.count("pallas_tool_denied_total", agent="harper", server="argos")
    assert listed.structured_content["servers"][0]["tools"] == ["search"]
    assert error_of(denied) == (
        "DENIED_BY_POLICY",
        "tool 'argos__delete_index' is not allowed for this agent",
    )
    assert error_of(unknown) == (
        "TOOL_NOT_FOUND",
        "server 'nowhere' is not one of this agent's servers (argos)",
    )
    assert argos.calls == []
    assert denials == 1
    assert any(r.name == "pallas.audit" and "DENY" in r.getMessage() for r in caplog.records)


async def test_get_server_tools_of_an_unknown_server_is_a_coded_error() -> None:
    async with in_memory(sources=[FakeSource("argos", ["search"])], toolExposure={"gateway": True}) as agent:
        result = await agent.client.call_tool("get_server_tools", {"server": "gone"}, raise_on_error=False)
    assert error_of(result) == ("TOOL_NOT_FOUND", "server 'gone' is not one of this agent's servers (argos)")
