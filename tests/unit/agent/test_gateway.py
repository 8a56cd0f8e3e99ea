"""Tools on demand: the gateway tools the model gets instead of every schema (agent/gateway.py).

The same policy, audit lines, metrics and error codes as a direct call; results untouched.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from pallas_api.errors import ErrorCode
from pallas_runtime.agent import gateway
from pallas_runtime.agent.loop import AgentLoop
from pallas_runtime.downstream.source import ProgressHandler, ToolOutcome
from pallas_runtime.messages import Completion, ImagePart, TextPart, ToolCall, ToolResultsMessage, Usage
from tests.unit.agent.doubles import FakeSource, ScriptedProvider, text
from tests.unit.agent.test_loop import make, run, value

GATEWAY = ["list_servers", "get_server_tools", "execute_tool"]


def call(name: str, **arguments: Any) -> Completion:
    return Completion("", (ToolCall("g0", name, arguments),), Usage(input=10, output=2))


def results(messages: list[Any]) -> list[Any]:
    return [r for m in messages if isinstance(m, ToolResultsMessage) for r in m.results]


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    decoded: dict[str, Any] = json.loads(result.content[0].text)
    return decoded


def big(name: str, count: int) -> FakeSource:
    return FakeSource(name, [f"tool_{i:03d}" for i in range(count)])


def offered_names(provider: ScriptedProvider, request: int = 0) -> list[str]:
    return [t.name for t in provider.calls[request][2]]


async def test_on_demand_offers_the_gateway_with_an_index_and_calls_a_tool_deep_in_the_list() -> None:
    source = big("tools", 300)
    loop, provider, metrics = make(
        [
            call("get_server_tools", server="tools", pattern="tool_29*"),
            call("execute_tool", server="tools", tool="tool_297", args={"q": "x"}),
            text("done"),
        ],
        [source],
        toolExposure={"mode": "onDemand"},
    )
    result = await run(loop, auth="Bearer t")
    assert offered_names(provider) == GATEWAY
    listing = provider.calls[0][2][0].description
    assert "tool_000" in listing
    assert "tool_299" in listing
    found, executed = results(result.messages)
    tools = answer(found)
    assert [t["name"] for t in tools["tools"]] == [f"tool_29{i}" for i in range(10)]
    assert tools["tools"][0]["inputSchema"] == {"type": "object"}
    assert (tools["totalAvailable"], tools["matched"], tools["truncated"]) == (300, 10, False)
    # The source got the caller's credential; echoed back, the model sees it scrubbed.
    assert executed.content == (TextPart("tool_297:[('q', 'x')]:[redacted]"),)
    assert source.calls == [("tool_297", {"q": "x"}, "Bearer t")]
    ok = {"agent": "harper", "server": "tools", "operation": "tool", "outcome": "ok"}
    assert value(metrics, "pallas_tool_calls_total", **ok) == 1


async def test_the_first_request_carries_far_fewer_schema_tokens_on_demand() -> None:
    sizes = {}
    for mode in ("all", "onDemand"):
        loop, provider, _ = make([text("hi")], [big("tools", 500)], toolExposure={"mode": mode})
        await run(loop)
        sizes[mode] = len(json.dumps([[t.name, t.description, t.input_schema] for t in provider.calls[0][2]]))
    assert sizes["onDemand"] * 3 < sizes["all"], sizes


async def test_auto_offers_every_schema_while_they_fit_and_goes_on_demand_past_the_budget() -> None:
    small, provider, _ = make([text("hi")], [big("tools", 3)], toolExposure={"mode": "auto"})
    await run(small)
    assert offered_names(provider) == ["tools__tool_000", "tools__tool_001", "tools__tool_002"]
    large, provider, _ = make(
        [text("hi")], [big("tools", 200)], toolExposure={"mode": "auto", "schemaBudgetTokens": 1000}
    )
    await run(large)
    assert offered_names(provider) == GATEWAY


async def test_auto_is_the_default_and_its_allowance_follows_the_context_window() -> None:
    loop, provider, _ = make(
        [text("hi")], [big("tools", 50)], capabilities={"contextWindow": 4096, "maxOutputTokens": 1024}
    )
    await run(loop)
    assert offered_names(provider) == GATEWAY  # 50 schemas outgrow a quarter of 3072 tokens
    loop, provider, _ = make([text("hi")], [big("tools", 50)])
    await run(loop)
    assert len(offered_names(provider)) == 50


async def test_denied_tools_are_not_listed_and_execute_tool_refuses_them_as_a_direct_call_would(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = FakeSource("argos", ["search", "delete_index"])
    loop, _, metrics = make(
        [
            call("list_servers"),
            call("get_server_tools", server="argos"),
            call("execute_tool", server="argos", tool="delete_index"),
            text("ok"),
        ],
        [source],
        tools={"deny": ["argos__delete_*"]},
        toolExposure={"mode": "onDemand"},
    )
    with caplog.at_level(logging.INFO, logger="pallas.audit"):
        result = await run(loop)
    listed, schemas, denied = results(result.messages)
    assert answer(listed) == {
        "servers": [{"name": "argos", "available": True, "toolCount": 1, "tools": ["search"]}]
    }
    assert [t["name"] for t in answer(schemas)["tools"]] == ["search"]
    assert denied.is_error
    assert denied.content == (TextPart("tool 'argos__delete_index' is not allowed for this agent"),)
    assert source.calls == []
    assert value(metrics, "pallas_tool_denied_total", agent="harper", server="argos") == 1
    audit = [r for r in caplog.records if r.name == "pallas.audit"]
    assert any(getattr(r, "code", None) == ErrorCode.DENIED_BY_POLICY for r in audit), [
        r.__dict__ for r in audit
    ]


async def test_get_server_tools_stays_within_its_allowance_and_says_what_it_left_out() -> None:
    loop, _, _ = make(
        [
            call("get_server_tools", server="tools"),
            call("get_server_tools", server="tools", max_schema_tokens=60),
            text("ok"),
        ],
        [big("tools", 400)],
        toolExposure={"mode": "onDemand", "schemaBudgetTokens": 2000},
    )
    result = await run(loop)
    capped, asked = (answer(r) for r in results(result.messages))
    assert capped["truncated"]
    assert 0 < capped["returned"] < 400
    assert capped["schemaTokens"] <= 2000
    assert "left out" in capped["note"]
    assert "pattern" in capped["note"]
    assert asked["schemaTokens"] <= 60
    assert asked["returned"] < capped["returned"]


async def test_execute_tool_passes_images_and_is_error_through_untouched() -> None:
    picture = ImagePart("iVBORw0KGgo=", "image/png")

    async def mixed(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> ToolOutcome:
        return ToolOutcome((TextPart("half"), picture), is_error=True)

    loop, _, metrics = make(
        [call("execute_tool", server="cam", tool="snap"), text("ok")],
        [FakeSource("cam", ["snap"], handler=mixed)],
        toolExposure={"mode": "onDemand"},
    )
    result = await run(loop)
    (snap,) = results(result.messages)
    assert snap.is_error
    assert snap.content == (TextPart("half"), picture)
    err = {"agent": "harper", "server": "cam", "operation": "tool", "outcome": "error"}
    assert value(metrics, "pallas_tool_calls_total", **err) == 1


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"server": "nowhere", "tool": "x"},
            "server 'nowhere' is not one of this agent's servers (tools, down)",
        ),
        (
            {"server": "tools", "tool": "missing"},
            "server 'tools' has no tool 'missing' (list_servers names them)",
        ),
        ({"server": "down", "tool": "x"}, "server 'down' could not list its tools now"),
        (
            {"server": "tools"},
            "arguments for 'execute_tool' are invalid: `tool` must be a non-empty string",
        ),
        (
            {"server": "tools", "tool": "tool_000", "args": [1]},
            "arguments for 'execute_tool' are invalid: `args` must be an object of the tool's arguments",
        ),
        (
            {"server": "tools", "tool": "tool_000", "timeout_ms": 0},
            "arguments for 'execute_tool' are invalid: `timeout_ms` must be a positive integer",
        ),
    ],
)
async def test_execute_tool_refusals_name_what_was_wrong(arguments: dict[str, Any], expected: str) -> None:
    down = FakeSource("down", ["x"], list_error=RuntimeError("connection refused"))
    loop, _, _ = make(
        [call("execute_tool", **arguments), text("ok")],
        [big("tools", 2), down],
        toolExposure={"mode": "onDemand"},
    )
    (refused,) = results((await run(loop)).messages)
    assert refused.is_error
    assert refused.content == (TextPart(expected),)


async def test_execute_tool_timeout_ms_bounds_the_call() -> None:
    async def never(
        tool: str, arguments: dict[str, Any], auth: str | None, p: ProgressHandler | None
    ) -> ToolOutcome:
        await asyncio.Event().wait()
        raise AssertionError

    loop, _, _ = make(
        [call("execute_tool", server="slow", tool="wait", timeout_ms=20), text("ok")],
        [FakeSource("slow", ["wait"], handler=never)],
        toolExposure={"mode": "onDemand"},
    )
    (late,) = results((await run(loop)).messages)
    assert late.is_error
    assert late.content == (TextPart("slow__wait did not answer within 0.02s (execute_tool's timeout_ms)"),)


async def test_peers_stay_direct_and_a_forced_tool_is_offered_by_name_on_demand() -> None:
    peer = FakeSource("scout", ["send_message"])
    loop, provider, _ = make(
        [call("tools__tool_001"), text("ok")],
        [big("tools", 5), peer],
        agents=[{"name": "scout", "url": "http://127.0.0.1:1/mcp"}],
        toolExposure={"mode": "onDemand"},
        requestParams={"toolChoice": "tools__tool_001"},
    )
    await run(loop)
    # One tool list for the whole turn (stable for the provider's prompt cache): the forced tool
    # stays offered after the first round, and it alone of its server's tools.
    for request in (0, 1):
        assert offered_names(provider, request) == ["tools__tool_001", "scout__send_message", *GATEWAY]


def test_the_index_falls_back_to_counts_when_the_names_would_not_fit() -> None:
    offered = asyncio.run(_offered([big("many", 500)]))
    assert "tool_499" in gateway.tool_index(offered, 1_000_000)
    assert gateway.tool_index(offered, 400) == "- many: 500 tools (list_servers names them)"


async def _offered(sources: list[FakeSource]) -> Any:
    loop: AgentLoop = make([], sources)[0]
    return await loop.offered_tools()
