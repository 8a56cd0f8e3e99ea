"""The audit line of every downstream tool call, and `pallas.forward.trace`, from a real agent.

A `pallas agent` process whose scripted model calls real MCP servers on 127.0.0.1: one call is
answered (ALLOW), one is refused by `tools.deny` and one names no tool (DENY), one answers with
an error result and one gets HTTP 500 (ERROR), one outlives its server's timeout (TIMEOUT).
"""

from __future__ import annotations

import json
from typing import Any

from fastmcp import Client

from tests.support import mcp_servers as ms
from tests.support.agents import agent_config, run_agent_process
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls

SECRET_ARGUMENT = "arg-secret-4711"
"""In the arguments of every call the model makes; the error tool echoes it into its result."""


async def test_one_audit_line_per_tool_call_with_outcome_and_latency_never_arguments_or_results(
    fake_openai: FakeOpenAI,
) -> None:
    async with (
        ms.header_echo_server() as echo,
        ms.slow_server() as slow,
        ms.error_server() as errors,
        ms.failing_calls_server() as broken,
    ):
        config = agent_config(
            fake_openai.base_url,
            name="auditor",
            servers=[
                {"name": "echo", "url": echo.url},
                # listing must fit in it too
                {"name": "slow", "url": slow.url, "timeoutSeconds": 1.5},
                {"name": "errors", "url": errors.url},
                {"name": "broken", "url": broken.url},
            ],
            tools={"deny": ["echo__*"]},
        )
        fake_openai.script(
            ToolCalls(
                [
                    Call("slow__sleep", {"seconds": 0}),
                    Call("echo__echo_headers", {"delay": 0}),
                    Call("nope__tool", {"q": SECRET_ARGUMENT}),
                    Call("errors__fail", {"message": f"bad {SECRET_ARGUMENT}"}),
                    Call("broken__echo_headers", {"delay": 0}),
                    Call("slow__sleep", {"seconds": 30}),
                ]
            ),
            Text("done"),
        )
        env = {"PALLAS_LOG_LEVEL": "DEBUG", "PALLAS_LOG_FORMAT": "json"}
        async with run_agent_process(config, env=env) as proc, Client(proc.url) as client:
            result = await client.call_tool("send_message", {"message": "use every tool"})
            records = [json.loads(line) for line in proc.stderr().splitlines()]
    assert result.content[0].text == "done"
    audit = [r for r in records if r["logger"] == "pallas.audit"]
    outcomes = sorted((r["server"], r["tool"], r["outcome"], r.get("reason")) for r in audit)
    assert outcomes == [
        ("", "nope__tool", "DENY", "unknown tool"),
        ("broken", "echo_headers", "ERROR", None),
        ("echo", "echo_headers", "DENY", "not allowed by spec.tools"),
        ("errors", "fail", "ERROR", None),
        ("slow", "sleep", "ALLOW", None),
        ("slow", "sleep", "TIMEOUT", None),
    ]
    for line in audit:
        assert line["level"] == "INFO"
        assert line["agent"] == "auditor"
        assert isinstance(line["latency_ms"], int | float)
        assert SECRET_ARGUMENT not in json.dumps(line), line  # neither arguments nor results
        assert "slept" not in json.dumps(line)
    timeout = next(r for r in audit if r["outcome"] == "TIMEOUT")
    assert 1450 <= timeout["latency_ms"] < 5000
    assert timeout["message"].startswith("tool call slow/sleep: TIMEOUT in ")

    traces = [r for r in records if r["logger"] == "pallas.forward.trace"]
    assert _one(traces, "broken: calling echo_headers failed")["level"] == "DEBUG"
    assert (
        "Traceback (most recent call last)" in _one(traces, "broken: calling echo_headers failed")["message"]
    )
    assert _one(traces, "slow: calling sleep (timed out after 1.5s) failed")["server"] == "slow"


async def test_without_debug_the_trace_logger_is_silent(fake_openai: FakeOpenAI) -> None:
    async with ms.failing_calls_server() as broken:
        config = agent_config(
            fake_openai.base_url, name="quiet", servers=[{"name": "broken", "url": broken.url}]
        )
        fake_openai.script(ToolCalls([Call("broken__echo_headers", {"delay": 0})]), Text("done"))
        async with (
            run_agent_process(config, env={"PALLAS_LOG_FORMAT": "json"}) as proc,
            Client(proc.url) as client,
        ):
            await client.call_tool("send_message", {"message": "go"})
            records = [json.loads(line) for line in proc.stderr().splitlines()]
    assert [r["outcome"] for r in records if r["logger"] == "pallas.audit"] == ["ERROR"]
    assert not [r for r in records if r["logger"] == "pallas.forward.trace"]


def _one(records: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    [record] = [r for r in records if r["message"].startswith(prefix)]
    return record
