"""Approval of tool calls through MCP elicitation, relayed up a two-agent chain.

Two agents served over real HTTP: `boss` delegates to `worker`, whose downstream fastmcp server
`ops` has a destructive tool. `worker`'s call of it waits for a yes: worker elicits from boss
(boss is worker's MCP client), boss relays the same question to the fastmcp Client that started
the turn, and the answer travels back down. The models are one scripted FakeOpenAI whose replies
depend on the agent's instruction (its system prompt).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types
import pytest
from fastmcp import Client, FastMCP
from fastmcp.client.elicitation import ElicitResult
from mcp_types import ToolAnnotations

from pallas_api.config import parse_config
from pallas_runtime.server import agent_app, build_server
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, bound_socket, serve, serve_app


def ops_mcp(ran: list[str]) -> FastMCP:
    """`delete_file` (destructive), `rename` (no annotations), `read` (read-only); `ran` records calls."""
    mcp = FastMCP("ops")

    @mcp.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
    def delete_file(path: str) -> str:
        ran.append(f"delete_file {path}")
        return f"deleted {path}"

    @mcp.tool
    def rename(path: str) -> str:
        ran.append(f"rename {path}")
        return f"renamed {path}"

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
    def read(path: str) -> str:
        ran.append(f"read {path}")
        return f"contents of {path}"

    return mcp


@contextlib.asynccontextmanager
async def chain(
    llm: FakeOpenAI,
    ops_url: str,
    policy: dict[str, Any],
    *,
    worker_alone: bool = False,
    worker: dict[str, Any] | None = None,
) -> AsyncIterator[dict[str, RunningServer]]:
    """`boss` → `worker` → `ops` (with `requireApproval: policy`); just `worker` when `worker_alone`.

    `worker` adds fields to the worker's config.
    """
    names = ["worker"] if worker_alone else ["worker", "boss"]
    sockets = {name: bound_socket() for name in names}
    urls = {name: f"http://127.0.0.1:{s.getsockname()[1]}/mcp" for name, s in sockets.items()}
    fields: dict[str, dict[str, Any]] = {
        "worker": {"servers": [{"name": "ops", "url": ops_url, "requireApproval": policy}], **(worker or {})},
        "boss": {"agents": [{"name": "worker", "url": urls["worker"]}]} if not worker_alone else {},
    }
    async with contextlib.AsyncExitStack() as stack:
        served = {}
        for name in names:
            config = parse_config(
                {
                    "name": name,
                    "model": llm.models[0],
                    "instruction": name,
                    "provider": {"name": "llm", "type": "openai", "baseURL": llm.base_url, "maxRetries": 0},
                    **fields[name],
                }
            )
            app = agent_app(build_server(config, environ={}))
            served[name] = await stack.enter_async_context(serve_app(app, sock=sockets[name]))
        yield served


def script(worker_calls: list[Call]) -> Callable[[dict[str, Any]], Any]:
    """boss asks worker once; worker makes `worker_calls`; each then answers with the results it got."""

    def step(request: dict[str, Any]) -> Any:
        agent = request["messages"][0]["content"]
        last = request["messages"][-1]
        if last["role"] == "tool":
            results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
            return Text(f"{agent} got: {' | '.join(results)}")
        if agent == "boss":
            return ToolCalls([Call("worker__send_message", {"message": "clean up"})])
        return ToolCalls(worker_calls)

    return step


class Caller:
    """An elicitation handler answering with `answer`, recording each question it was asked."""

    def __init__(self, answer: Any, *, hold: asyncio.Event | None = None) -> None:
        self.answer = answer
        self.hold = hold
        self.asked: list[mcp_types.ElicitRequestParams] = []

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> Any:
        self.asked.append(params)
        if self.hold is not None:
            await self.hold.wait()
        return self.answer


@pytest.fixture
async def ops() -> AsyncIterator[tuple[RunningServer, list[str]]]:
    ran: list[str] = []
    async with serve(ops_mcp(ran)) as server:
        yield server, ran


class ProgressLog(list[str]):
    """The progress messages a client saw, in order; `handler` is its progress handler."""

    async def handler(self, value: float, total: float | None, message: str | None) -> None:
        self.append(message or "")


ApprovedDelete = tuple[RunningServer, list[str], Caller, ProgressLog]


@pytest.fixture
def approved_delete(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]], caplog: pytest.LogCaptureFixture
) -> ApprovedDelete:
    """The model deletes a file through `ops`, a caller approves when asked, its progress is kept."""
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/tmp/x"})])
    caplog.set_level(logging.INFO, logger="pallas.audit")
    return server, ran, Caller(ElicitResult(action="accept", content={"approve": True})), ProgressLog()


def approvals(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The approval audit lines so far: their verdict, reason and why."""
    return [
        {"approval": r.approval, "reason": getattr(r, "reason", ""), "why": r.why, "agent": r.agent}  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "pallas.audit" and hasattr(r, "approval")
    ]


async def test_an_approved_call_runs_after_the_question_went_up_the_chain(
    fake_openai: FakeOpenAI, approved_delete: ApprovedDelete, caplog: pytest.LogCaptureFixture
) -> None:
    server, ran, caller, progress = approved_delete
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}) as served,
        Client(
            served["boss"].url, mode="legacy", elicitation_handler=caller, progress_handler=progress.handler
        ) as client,
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert not result.is_error
    assert result.content[0].text == "boss got: worker got: deleted /tmp/x"
    assert ran == ["delete_file /tmp/x"]
    [question] = caller.asked
    assert question.message == (
        'Agent worker wants to call ops/delete_file with {"path": "/tmp/x"} '
        "(requireApproval.tools delete_*). Approve?"
    )
    assert question.requested_schema["required"] == ["approve"]
    assert "worker/send_message: ops/delete_file: awaiting approval" in progress
    assert approvals(caplog) == [
        {"approval": "APPROVED", "reason": "", "why": "requireApproval.tools delete_*", "agent": "worker"}
    ]


async def test_a_rejected_call_is_a_tool_result_with_the_reason_and_the_turn_goes_on(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/etc"})])
    caller = Caller(ElicitResult(action="accept", content={"approve": False, "reason": "not /etc"}))
    caplog.set_level(logging.INFO, logger="pallas.audit")
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}) as served,
        Client(served["boss"].url, mode="legacy", elicitation_handler=caller) as client,
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert not result.is_error
    assert result.content[0].text == (
        "boss got: worker got: Error: the caller rejected calling ops__delete_file: not /etc; "
        "the tool was not run"
    )
    assert ran == []
    assert [a["approval"] for a in approvals(caplog)] == ["REJECTED"]
    assert approvals(caplog)[0]["reason"] == "not /etc"


async def test_a_declined_question_rejects_the_call(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/srv"})])
    caller = Caller(ElicitResult(action="decline"))
    async with (
        chain(fake_openai, server.url, {"tools": ["*"]}) as served,
        Client(served["boss"].url, mode="legacy", elicitation_handler=caller) as client,
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert result.content[0].text == (
        "boss got: worker got: Error: the caller rejected calling ops__delete_file: declined; "
        "the tool was not run"
    )
    assert ran == []


async def test_no_answer_in_time_times_out_without_running_the_tool(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/var"})])
    never = asyncio.Event()
    caller = Caller(ElicitResult(action="accept", content={"approve": True}), hold=never)
    caplog.set_level(logging.INFO, logger="pallas.audit")
    try:
        async with (
            chain(fake_openai, server.url, {"tools": ["delete_*"], "timeoutSeconds": 0.5}) as served,
            Client(served["boss"].url, mode="legacy", elicitation_handler=caller) as client,
        ):
            result = await asyncio.wait_for(client.call_tool_mcp("send_message", {"message": "start"}), 20)
    finally:
        never.set()
    assert not result.is_error
    assert result.content[0].text == (
        "boss got: worker got: Error: no approval to call ops__delete_file within 0.5s; the tool was not run"
    )
    assert ran == []
    assert len(caller.asked) == 1
    [line] = approvals(caplog)
    assert (line["approval"], line["reason"]) == ("TIMEOUT", "no answer within 0.5s")


async def test_a_client_without_elicitation_gets_denied_by_policy_with_the_reason(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/home"})])
    caplog.set_level(logging.INFO, logger="pallas.audit")
    async with chain(fake_openai, server.url, {"tools": ["delete_*"]}) as served:
        async with Client(
            served["boss"].url, mode="legacy"
        ) as client:  # no elicitation handler: no capability
            relayed = await client.call_tool_mcp("send_message", {"message": "start"})
        async with Client(served["worker"].url, mode="legacy") as client:
            direct = await client.call_tool_mcp(
                "send_message", {"message": "start"}, meta={"pallas.dev/toolCalls": True}
            )
    reason = (
        "the caller's MCP client does not support elicitation (its initialize declared no "
        "`elicitation` capability), so nobody can approve the call"
    )
    refusal = f"Error: ops__delete_file needs the caller's approval: {reason}; the tool was not run"
    assert relayed.content[0].text == f"boss got: worker got: {refusal}"
    assert direct.content[0].text == f"worker got: {refusal}"
    [call] = direct.meta["pallas.dev/toolCalls"]
    assert call["isError"] is True
    assert ran == []
    assert [a["approval"] for a in approvals(caplog)] == ["UNAVAILABLE", "UNAVAILABLE"]
    refused = [
        r for r in caplog.records if getattr(r, "tool", None) == "delete_file" and hasattr(r, "outcome")
    ]
    assert [(r.outcome, r.code) for r in refused] == [("DENY", "DENIED_BY_POLICY")] * 2  # type: ignore[attr-defined]


async def test_an_approval_answered_over_mrtr_runs_the_tool_exactly_once_in_the_same_turn(
    fake_openai: FakeOpenAI, approved_delete: ApprovedDelete, caplog: pytest.LogCaptureFixture
) -> None:
    """A 2026-07-28 client: the question is an `input_required` result, the retry resumes the turn."""
    server, ran, caller, progress = approved_delete
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}, worker_alone=True) as served,
        Client(served["worker"].url, elicitation_handler=caller, progress_handler=progress.handler) as client,
    ):  # mode auto: 2026-07-28
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert not result.is_error
    assert result.content[0].text == "worker got: deleted /tmp/x"
    assert ran == ["delete_file /tmp/x"]
    [question] = caller.asked
    assert question.message.startswith("Agent worker wants to call ops/delete_file")
    assert len(fake_openai.completions) == 2  # the tool call, then the answer: the turn was not re-run
    assert "ops/delete_file: awaiting approval" in progress  # on the first leg
    assert "ops/delete_file: completed" in progress  # on the retry: the held turn's progress follows it
    assert [a["approval"] for a in approvals(caplog)] == ["APPROVED"]


async def test_a_refusal_over_mrtr_never_runs_the_tool(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/etc"})])
    caller = Caller(ElicitResult(action="accept", content={"approve": False, "reason": "not /etc"}))
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}, worker_alone=True) as served,
        Client(served["worker"].url, elicitation_handler=caller) as client,
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert result.content[0].text == (
        "worker got: Error: the caller rejected calling ops__delete_file: not /etc; the tool was not run"
    )
    assert ran == []
    assert len(caller.asked) == 1


async def test_a_peers_question_reaches_a_sessionless_client_over_mrtr_through_the_chain(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/tmp/y"})])
    caller = Caller(ElicitResult(action="accept", content={"approve": True}))
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}) as served,
        Client(served["boss"].url, elicitation_handler=caller) as client,
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert result.content[0].text == "boss got: worker got: deleted /tmp/y"
    assert ran == ["delete_file /tmp/y"]
    [question] = caller.asked
    assert question.message.startswith("Agent worker wants to call ops/delete_file")


async def test_a_sessionless_client_that_declared_no_elicitation_is_not_asked_and_is_told_why(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/opt"})])
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}, worker_alone=True) as served,
        Client(served["worker"].url) as client,  # 2026-07-28, no elicitation handler
    ):
        result = await client.call_tool_mcp("send_message", {"message": "start"})
    assert result.content[0].text == (
        "worker got: Error: ops__delete_file needs the caller's approval: the caller's MCP client "
        "declared no `elicitation` capability in its request, so nobody can approve the call; "
        "the tool was not run"
    )
    assert ran == []


async def test_an_mrtr_question_unanswered_within_timeout_seconds_times_out_and_runs_nothing(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/var"})])
    hold = asyncio.Event()
    caller = Caller(ElicitResult(action="accept", content={"approve": True}), hold=hold)
    async with (
        chain(
            fake_openai, server.url, {"tools": ["delete_*"], "timeoutSeconds": 1}, worker_alone=True
        ) as served,
        Client(served["worker"].url, elicitation_handler=caller) as client,
    ):
        call = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "start"}))
        await asyncio.sleep(1.5)  # the server gave up on the question meanwhile
        hold.set()  # a late yes: the turn has moved on, the retry gets its end
        result = await call
    assert result.content[0].text == (
        "worker got: Error: no approval to call ops__delete_file within 1s; the tool was not run"
    )
    assert ran == []


async def test_destructive_hint_is_honoured_by_default_and_can_be_turned_off(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    server, ran = ops
    calls = [
        Call("ops__delete_file", {"path": "a"}),
        Call("ops__rename", {"path": "b"}),
        Call("ops__read", {"path": "c"}),
    ]
    fake_openai.default = script(calls)
    caller = Caller(ElicitResult(action="accept", content={"approve": True}))
    async with (
        chain(fake_openai, server.url, {}) as served,
        Client(served["boss"].url, mode="legacy", elicitation_handler=caller) as client,
    ):
        await client.call_tool_mcp("send_message", {"message": "start"})
    assert [q.meta["pallas.dev/approval"]["tool"] for q in caller.asked] == ["delete_file"]
    assert caller.asked[0].meta["pallas.dev/approval"]["why"] == "destructiveHint"
    assert sorted(ran) == ["delete_file a", "read c", "rename b"]

    ran.clear()
    caller.asked.clear()
    async with (
        chain(fake_openai, server.url, {"destructiveHint": False}) as served,
        Client(served["boss"].url, mode="legacy", elicitation_handler=caller) as client,
    ):
        await client.call_tool_mcp("send_message", {"message": "start"})
    assert caller.asked == []
    assert sorted(ran) == ["delete_file a", "read c", "rename b"]


async def test_a_turn_cancelled_while_it_waits_stops_waiting_and_runs_nothing(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    server, ran = ops
    fake_openai.default = script([Call("ops__delete_file", {"path": "/boot"})])
    late = asyncio.Event()
    caller = Caller(ElicitResult(action="accept", content={"approve": True}), hold=late)
    caplog.set_level(logging.INFO, logger="pallas.audit")
    async with (
        chain(fake_openai, server.url, {"tools": ["delete_*"]}, worker_alone=True) as served,
        Client(served["worker"].url, mode="legacy", elicitation_handler=caller) as client,
    ):
        call = asyncio.create_task(client.call_tool_mcp("send_message", {"message": "start"}))
        for _ in range(200):
            if caller.asked:
                break
            await asyncio.sleep(0.02)
        assert len(caller.asked) == 1
        call.cancel()  # the client sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
        late.set()  # an answer after the turn ended changes nothing
        fake_openai.default = Text("free again")
        after = await asyncio.wait_for(client.call_tool_mcp("send_message", {"message": "next"}), 20)
    assert after.content[0].text == "free again"
    assert ran == []
    assert approvals(caplog) == []  # no decision was made


async def test_a_gateway_client_calling_execute_tool_is_asked_too(
    fake_openai: FakeOpenAI, ops: tuple[RunningServer, list[str]]
) -> None:
    """The policy holds however the tool is reached: here a client's `execute_tool` on the agent."""
    server, ran = ops
    approve = Caller(ElicitResult(action="accept", content={"approve": True}))
    refuse = Caller(ElicitResult(action="accept", content={"approve": False, "reason": "no"}))
    call = {"server": "ops", "tool": "delete_file", "args": {"path": "/mnt"}}
    async with chain(
        fake_openai,
        server.url,
        {"tools": ["delete_*"]},
        worker_alone=True,
        worker={"toolExposure": {"gateway": True}},
    ) as served:
        async with Client(served["worker"].url, mode="legacy", elicitation_handler=approve) as client:
            approved = await client.call_tool_mcp("execute_tool", call)
        async with Client(served["worker"].url, mode="legacy", elicitation_handler=refuse) as client:
            refused = await client.call_tool_mcp("execute_tool", call)
    assert not approved.is_error
    assert approved.content[0].text == "deleted /mnt"
    assert refused.is_error
    assert refused.content[0].text == "the caller rejected calling ops__delete_file: no; the tool was not run"
    assert refused.structured_content["error"]["code"] == "DENIED_BY_POLICY"
    assert ran == ["delete_file /mnt"]
    assert len(approve.asked) == len(refuse.asked) == 1
