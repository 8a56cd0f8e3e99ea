"""Traces across agents, read back from a real Jaeger: `pallas run` with `spec.telemetry`.

An orchestrator delegates to a researcher, which calls a downstream MCP tool; the caller's
`traceparent` (in `_meta`, or in the HTTP header) is continued, and the whole turn is one trace
with the GenAI and MCP spans and attributes docs/api.md §5 (Traces) promises.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from fastmcp import Client, Context, FastMCP
from fastmcp.client.transports import StreamableHttpTransport

from tests.integration.runtime.test_run_command import pallas_run
from tests.support.fake_llm import Call, FakeOpenAI, FakeUsage, Text, ToolCalls
from tests.support.jaeger import Jaeger, jaeger, parent_of, tags
from tests.support.local_manifests import fake_llm_deployment
from tests.support.mcp_peers import free_ports
from tests.support.mcp_servers import RunningServer, serve

__all__ = ["jaeger"]

API_KEY = "sk-trace-secret-0123456789"
SECRET_WORD = "hunter2-do-not-trace"


def lookup_mcp(seen: list[dict[str, Any]]) -> FastMCP:
    """Tool `lookup`: answers, and notes the `_meta` each call arrived with."""
    mcp = FastMCP("tools")

    @mcp.tool
    async def lookup(query: str, ctx: Context) -> str:
        meta = ctx.request_context.meta if ctx.request_context is not None else None
        seen.append(dict(meta or {}))
        return f"found {query}"

    return mcp


def manifests(llm: FakeOpenAI, tools: RunningServer, otlp_url: str) -> list[dict[str, Any]]:
    telemetry = {"endpoint": otlp_url, "resourceAttributes": {"deployment.environment.name": "test"}}
    return [
        *fake_llm_deployment(
            llm, "traced", API_KEY, mcpServers={"tools": {"url": tools.url}}, telemetry=telemetry
        ),
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "orchestrator"},
            "spec": {"deployment": "traced", "instruction": "orchestrate", "agents": ["researcher"]},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "researcher"},
            "spec": {"deployment": "traced", "instruction": "research", "servers": ["tools"]},
        },
    ]


def script(request_json: dict[str, Any]) -> Any:
    """The orchestrator asks the researcher; the researcher looks up; each then answers."""
    last, system = request_json["messages"][-1], request_json["messages"][0]["content"]
    usage = FakeUsage(input=120, output=7)
    if last["role"] == "tool":
        return Text(f"{system}: {last['content']}", usage=usage)
    if system == "orchestrate":
        return ToolCalls([Call("researcher__send_message", {"message": "look up Plato"})], usage=usage)
    return ToolCalls([Call("tools__lookup", {"query": f"Plato {SECRET_WORD}"})], usage=usage)


def named(trace: dict[str, Any], name: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [
        s
        for s in trace["spans"]
        if s["operationName"] == name and (kind is None or tags(s).get("span.kind") == kind)
    ]


def complete(trace: dict[str, Any]) -> bool:
    """Both turns' spans have arrived (each agent's processor sends its own batches)."""
    return (
        len(named(trace, "execute_tool lookup")) == 1 and len(named(trace, "invoke_agent orchestrator")) == 1
    )


@pytest.mark.timeout(180)
async def test_a_delegation_with_a_tool_call_is_one_trace_in_jaeger(
    fake_openai: FakeOpenAI, jaeger: Jaeger, tmp_path: Path
) -> None:
    fake_openai.default = script
    seen: list[dict[str, Any]] = []
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    header_trace = secrets.token_hex(16)
    async with serve(lookup_mcp(seen)) as tools:
        path = tmp_path / "agents.yaml"
        path.write_text(yaml.safe_dump_all(manifests(fake_openai, tools, jaeger.otlp_url)))
        base = free_ports(3)
        async with pallas_run(path, base) as proc:
            url = f"http://127.0.0.1:{base + 1}/mcp"
            async with Client(url, mode="legacy") as client:
                result = await client.call_tool(
                    "send_message",
                    {"message": "who wrote The Republic?"},
                    meta={"traceparent": f"00-{trace_id}-{caller_span}-01"},
                )
            assert result.content[0].text == "orchestrate: research: found Plato " + SECRET_WORD
            # The same continued from the HTTP header (a proxy's or a web client's).
            headers = {"traceparent": f"00-{header_trace}-{caller_span}-01"}
            async with Client(StreamableHttpTransport(url, headers=headers), mode="legacy") as client:
                await client.call_tool("send_message", {"message": "again"})
            trace = await jaeger.wait_for_trace(
                "pallas-run", lambda t: t["traceID"] == trace_id and complete(t)
            )
            by_header = await jaeger.wait_for_trace(
                "pallas-run", lambda t: t["traceID"] == header_trace and complete(t)
            )
            async with httpx2.AsyncClient() as http:
                accept = {"accept": "application/openmetrics-text; version=1.0.0"}
                metrics = (await http.get(f"http://127.0.0.1:{base + 2}/metrics", headers=accept)).text
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=15)

    # The downstream tool got the trace in its request's _meta: one trace down to the tool.
    assert len(seen) == 2
    assert seen[0]["traceparent"].split("-")[1] == trace_id
    spans = {s["spanID"]: s for s in trace["spans"]}
    # The orchestrator's server span continues the caller's span (not in Jaeger: the caller's own).
    roots = [s for s in trace["spans"] if parent_of(s) not in spans]
    assert [parent_of(s) for s in roots] == [caller_span], [s["operationName"] for s in roots]

    def chain(span: dict[str, Any]) -> list[str]:
        names = []
        while span is not None:
            names.append(span["operationName"])
            span = spans.get(parent_of(span) or "")
        return names

    [tool_span] = named(trace, "execute_tool lookup")
    # One parent chain through both agents, from the tool call up to the caller's span.
    assert chain(tool_span) == [
        "execute_tool lookup",  # the researcher's call of the downstream tool
        "invoke_agent researcher",  # the researcher's turn
        "tools/call send_message",  # the researcher's MCP server span (fastmcp)
        "MCP send tools/call send_message",  # the orchestrator's MCP client span (the MCP SDK)
        "invoke_agent researcher",  # the orchestrator's delegation
        "invoke_agent orchestrator",  # the orchestrator's turn
        "tools/call send_message",  # the orchestrator's MCP server span, the caller's child
    ]
    [downstream_call] = named(trace, "MCP send tools/call lookup")
    assert parent_of(downstream_call) == tool_span["spanID"]

    tool_tags = tags(tool_span)
    assert tool_tags["gen_ai.operation.name"] == "execute_tool"
    assert tool_tags["gen_ai.tool.name"] == "lookup"
    assert tool_tags["pallas.mcp.server"] == "tools"
    assert tool_tags["gen_ai.agent.name"] == "researcher"
    assert "gen_ai.tool.call.arguments" not in tool_tags  # content capture is off

    [delegation] = named(trace, "invoke_agent researcher", "client")
    assert tags(delegation)["gen_ai.operation.name"] == "invoke_agent"
    assert tags(delegation)["gen_ai.agent.name"] == "orchestrator"

    chats = named(trace, f"chat {fake_openai.models[0]}")
    assert len(chats) == 4  # two rounds of each agent
    for chat in chats:
        chat_tags = tags(chat)
        assert chat_tags["gen_ai.operation.name"] == "chat"
        assert chat_tags["gen_ai.provider.name"] == "openai"
        assert chat_tags["gen_ai.request.model"] == fake_openai.models[0]
        assert chat_tags["gen_ai.usage.input_tokens"] == 120
        assert chat_tags["gen_ai.usage.output_tokens"] == 7
        assert chat_tags["gen_ai.agent.name"] in {"orchestrator", "researcher"}
        assert "gen_ai.input.messages" not in chat_tags

    # Each LLM request carried its chat span in the HTTP traceparent header (an LLM gateway that
    # traces continues the trace).
    sent = [r.headers["traceparent"].split("-") for r in fake_openai.completions]
    assert {t for _, t, _, _ in sent} == {trace_id, header_trace}
    assert {s for _, t, s, _ in sent if t == trace_id} == {c["spanID"] for c in chats}

    [turn] = named(trace, "invoke_agent orchestrator")
    assert tags(turn)["gen_ai.conversation.id"]  # the conversation the turn was kept in

    # Resource attributes from spec.telemetry; nothing secret anywhere in the trace.
    process = next(iter(trace["processes"].values()))
    process_tags = tags(process)
    assert process_tags["pallas.deployment"] == "traced"
    assert process_tags["deployment.environment.name"] == "test"
    everything = json.dumps(trace) + json.dumps(by_header)
    assert API_KEY not in everything
    assert SECRET_WORD not in everything
    assert seen[1]["traceparent"].split("-")[1] == header_trace

    # The researcher's latency histograms carry the trace ids as exemplars (OpenMetrics): a
    # bucket keeps its latest observation's, so the second message's is in every histogram.
    exemplars = re.findall(r'_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})"\}', metrics)
    assert header_trace in exemplars, metrics
    assert set(exemplars) <= {trace_id, header_trace}
    # Audit lines name the trace (and span) of the tool call they record.
    audits = [json.loads(line) for line in stderr.splitlines() if '"pallas.audit"' in line]
    lookups = [a for a in audits if a["tool"] == "lookup"]
    assert [a["trace_id"] for a in lookups] == [trace_id, header_trace]
    assert lookups[0]["span_id"] == tool_span["spanID"]
