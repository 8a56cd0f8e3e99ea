"""Workflow turns under `pallas run` as any turn: planned, kept in history, approved, traced, drained.

The agents and the scripted FakeOpenAI of `test_workflows`: step agents answer `<agent>: <message>`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult

from tests.integration.runtime.test_approvals import Caller, ops_mcp
from tests.integration.runtime.test_workflows import echo, inputs, running
from tests.support.a2a_agents import echo_a2a_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.jaeger import Jaeger, jaeger, parent_of, tags
from tests.support.mcp_servers import serve

__all__ = ["jaeger"]


def planning(request: dict[str, Any]) -> Any:
    """The planner asks the researcher, then the writer, then answers; the steps echo."""
    system, messages = request["messages"][0]["content"], request["messages"]
    if not system.startswith("plan-flow"):
        return echo()(request)
    results = [m for m in messages if m["role"] == "user" and m["content"].startswith("Result of ")]
    if not results:
        return Text(json.dumps({"agent": "researcher", "message": "find tides"}))
    if len(results) == 1:
        return Text(json.dumps({"agent": "writer", "message": "write up tides"}))
    return Text(json.dumps({"answer": "tides, researched and written"}))


async def test_a_planner_runs_the_steps_its_model_plans_and_the_turn_keeps_them_in_history(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = planning
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with running(tmp_path, fake_openai, "plan-flow") as run, Client(run.url("plan-flow")) as client:
        result = await client.call_tool_mcp(
            "send_message", {"message": "tides", "conversation_id": "plan-1"}, progress_handler=on_progress
        )
        history = await client.get_prompt("plan-flow_history", {"conversation_id": "plan-1"})
    assert not result.is_error, result.content
    assert result.content[0].text == "tides, researched and written"
    assert inputs(fake_openai, "researcher") == ["find tides"]
    assert inputs(fake_openai, "writer") == ["write up tides"]
    plans = [
        c.json for c in fake_openai.completions if c.json["messages"][0]["content"].startswith("plan-flow")
    ]
    assert len(plans) == 3
    assert all(p["response_format"] == {"type": "json_object"} for p in plans)
    assert "- researcher: " in plans[0]["messages"][0]["content"]  # the agents with their descriptions
    told = [m["content"] for m in plans[2]["messages"] if m["role"] == "user"]
    assert told == [
        "tides",
        "Result of researcher:\nresearcher: find tides",
        "Result of writer:\nwriter: write up tides",
    ]
    assert "planner: step 1/3 researcher…" in progress
    assert "planner: step 2/3 writer…" in progress
    # The history shows the turn with its steps, each a peer call and its answer.
    lines = [m.content.text for m in history.messages]  # type: ignore[union-attr]
    assert lines == [
        "tides",
        '[tool call] researcher__send_message {"message": "find tides"}',
        "[tool result] researcher__send_message: researcher: find tides",
        '[tool call] writer__send_message {"message": "write up tides"}',
        "[tool result] writer__send_message: writer: write up tides",
        "tides, researched and written",
    ], lines


async def test_a_step_needing_approval_asks_the_workflows_caller(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    ran: list[str] = []

    def script(request: dict[str, Any]) -> Any:
        system, last = request["messages"][0]["content"], request["messages"][-1]
        if system == "researcher" and last["role"] == "user":
            return ToolCalls([Call("ops__delete_file", {"path": "/tmp/x"})])
        if system == "researcher":
            return Text(f"researcher: {last['content']}")
        return echo()(request)

    fake_openai.default = script
    caller = Caller(ElicitResult(action="accept", content={"approve": True}))
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with serve(ops_mcp(ran)) as ops:

        def with_ops(docs: list[dict[str, Any]]) -> None:
            for doc in docs:
                if doc["kind"] == "PallasDeployment":
                    doc["spec"]["mcpServers"] = {
                        "ops": {"url": ops.url, "requireApproval": {"tools": ["delete_*"]}}
                    }
                if doc["metadata"]["name"] == "researcher":
                    doc["spec"]["servers"] = ["ops"]

        async with (
            running(tmp_path, fake_openai, "chain-flow", edit=with_ops) as run,
            Client(run.url("chain-flow"), mode="legacy", elicitation_handler=caller) as client,
        ):
            result = await client.call_tool_mcp(
                "send_message", {"message": "clean up"}, progress_handler=on_progress
            )
    assert not result.is_error, result.content
    assert result.content[0].text == "writer: researcher: deleted /tmp/x"
    assert ran == ["delete_file /tmp/x"]
    [question] = caller.asked
    assert question.message.startswith("Agent researcher wants to call ops/delete_file"), question.message
    assert "researcher/send_message: ops/delete_file: awaiting approval" in progress


async def test_each_step_is_one_span_under_the_workflow_turns_span(
    fake_openai: FakeOpenAI, jaeger: Jaeger, tmp_path: Path
) -> None:
    fake_openai.default = echo()

    def traced(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc["kind"] == "PallasDeployment":
                doc["spec"]["telemetry"] = {"endpoint": jaeger.otlp_url}

    def turn_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for s in trace["spans"] if s["operationName"] == "invoke_agent chain-flow"]

    def steps_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            s
            for s in trace["spans"]
            if s["operationName"] in ("invoke_agent researcher", "invoke_agent writer")
            and tags(s).get("span.kind") == "client"
        ]

    async with running(tmp_path, fake_openai, "chain-flow", edit=traced) as run:
        async with Client(run.url("chain-flow")) as client:
            result = await client.call_tool_mcp("send_message", {"message": "topic"})
        assert not result.is_error, result.content
        trace = await jaeger.wait_for_trace(
            "pallas-run", lambda t: len(turn_of(t)) == 1 and len(steps_of(t)) == 2
        )
    [turn] = turn_of(trace)
    steps = steps_of(trace)
    assert sorted(s["operationName"] for s in steps) == ["invoke_agent researcher", "invoke_agent writer"]
    assert {parent_of(s) for s in steps} == {turn["spanID"]}
    assert {tags(s)["gen_ai.agent.name"] for s in steps} == {"chain-flow"}


async def test_a_workflow_in_flight_when_pallas_run_stops_finishes_its_steps(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def answer(request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == "writer":  # the last step lasts until the test says
            held.set()
            await release.wait()
        return echo()(request)

    fake_openai.default = answer
    async with running(tmp_path, fake_openai, "chain-flow", log=tmp_path / "run.log") as run:
        async with Client(run.url("chain-flow")) as client:
            call = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "topic"}))
            await asyncio.wait_for(held.wait(), 30)
            assert run.proc is not None
            run.proc.send_signal(signal.SIGTERM)  # as a rollout stops a pod: its turns drain
            await asyncio.sleep(0.5)
            release.set()
            result = await asyncio.wait_for(call, 30)
        assert await asyncio.to_thread(run.proc.wait, 20) == 0
    assert not result.is_error, result.content
    assert result.content[0].text == "writer: researcher: topic"
    log = (tmp_path / "run.log").read_text()
    assert " 1 interrupted" not in log, log[-3000:]


async def test_a_step_may_be_an_a2a_agent(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.default = echo()
    async with echo_a2a_agent() as outside:

        def with_echo(docs: list[dict[str, Any]]) -> None:
            for doc in docs:
                if doc["kind"] == "PallasDeployment":
                    doc["spec"]["a2aAgents"] = {"echo": {"url": outside.url}}
                if doc["metadata"]["name"] == "a2a-flow":
                    doc["spec"]["a2aAgents"] = ["echo"]

        async with (
            running(tmp_path, fake_openai, "a2a-flow", edit=with_echo) as run,
            Client(run.url("a2a-flow")) as client,
        ):
            result = await client.call_tool_mcp("send_message", {"message": "topic"})
    assert not result.is_error, result.content
    assert result.content[0].text == "echo: researcher: topic"
    assert outside.received[0].metadata["pallas.dev/callPath"] == ["a2a-flow"]


async def test_a_workflow_the_drain_outlasts_is_kept_as_a_failed_turn(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def answer(request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == "writer":  # the last step outlasts the drain
            held.set()
            await release.wait()
        return echo()(request)

    def short_drains(docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            if doc["metadata"]["name"] in ("chain-flow", "writer"):
                doc["spec"]["pod"] = {"drainSeconds": 1}

    fake_openai.default = answer
    conversation = f"drain-{secrets.token_hex(6)}"  # the default SQLite store outlives the run
    try:
        async with running(tmp_path, fake_openai, "chain-flow", edit=short_drains) as run:
            async with Client(run.url("chain-flow")) as client:
                call = asyncio.create_task(
                    client.call_tool_mcp(
                        "send_message", {"message": "topic", "conversation_id": conversation}
                    )
                )
                await asyncio.wait_for(held.wait(), 30)
                assert run.proc is not None
                run.proc.send_signal(signal.SIGTERM)
                result = await asyncio.wait_for(call, 30)
            assert await asyncio.to_thread(run.proc.wait, 20) == 0
    finally:
        release.set()
    assert result.is_error
    assert "AGENT_SHUTTING_DOWN" in json.dumps(result.model_dump(mode="json")), result
    async with running(tmp_path, fake_openai, "chain-flow") as run, Client(run.url("chain-flow")) as client:
        history = await client.get_prompt("chain-flow_history", {"conversation_id": conversation})
    lines = [m.content.text for m in history.messages]  # type: ignore[union-attr]
    assert lines[0] == "topic"
    assert lines[-1].startswith("[turn failed] AGENT_SHUTTING_DOWN: "), lines
