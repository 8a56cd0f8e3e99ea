"""Approval questions: the whole call shown, a bounded number asked, globs not fooled by spelling.

Found by the second hardening pass (issue 46):

- the question's text cut the arguments at 400 characters with nothing more in `_meta`: a padded
  argument hid `PRODUCTION-DATABASE` behind the cut, and the call was approved unseen. Now the
  `_meta` carries the full arguments and the text, when cut, names every argument;
- a model calling 40 guarded tools in one round put 40 questions to its caller in half a second:
  a turn now has at most `MAX_PENDING_QUESTIONS` waiting at once, the rest refused unasked;
- `requireApproval.tools: [delete_*]` matched raw names, so a server's `Delete-Record` ran with
  no question asked: names and globs are now compared without case and punctuation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types
from fastmcp import Client, FastMCP
from fastmcp.client.elicitation import ElicitResult

from pallas_api.approval import MAX_PENDING_QUESTIONS
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve

PADDING = "x" * 500


def db_mcp(ran: list[str]) -> FastMCP:
    """`drop_table` and `Delete-Record`: tools the policy guards; `ran` records what ran."""
    mcp = FastMCP("db")

    @mcp.tool
    def drop_table(note: str, target: str) -> str:
        ran.append(f"drop_table {target}")
        return f"dropped on {target}"

    @mcp.tool(name="Delete-Record")
    def delete_record(record: str) -> str:
        ran.append(f"Delete-Record {record}")
        return f"deleted {record}"

    return mcp


class Approver:
    """The caller's elicitation handler: says no after `wait` seconds; counts questions at once."""

    def __init__(self, wait: float = 0.0) -> None:
        self.wait = wait
        self.asked: list[mcp_types.ElicitRequestParams] = []
        self.waiting = 0
        self.most_waiting = 0

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> Any:
        self.asked.append(params)
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            await asyncio.sleep(self.wait)
        finally:
            self.waiting -= 1
        return ElicitResult(action="accept", content={"approve": False, "reason": "no"})


async def ask(calls: list[Call], policy: dict[str, Any], approver: Approver) -> tuple[list[str], Any]:
    ran: list[str] = []
    async with serve(db_mcp(ran)) as db, FakeOpenAI() as llm:
        llm.script(ToolCalls(calls), Text("done"))
        server = {"name": "db", "url": db.url, "requireApproval": policy}
        async with (
            serve_agent(agent_config(llm.base_url, name="ops", servers=[server])) as agent,
            Client(agent.url, mode="legacy", elicitation_handler=approver, timeout=60) as client,
        ):
            result = await client.call_tool_mcp("send_message", {"message": "go"})
    return ran, result


async def test_a_padded_argument_is_in_the_question_and_the_full_arguments_in_its_meta() -> None:
    arguments = {"note": PADDING, "target": "PRODUCTION-DATABASE"}
    approver = Approver()
    ran, result = await ask([Call("db__drop_table", arguments)], {"tools": ["drop_*"]}, approver)
    assert not result.is_error, result
    assert ran == []
    (question,) = approver.asked
    assert "PRODUCTION-DATABASE" in question.message
    assert "the full arguments are in _meta pallas.dev/approval.arguments" in question.message
    meta = (question.meta or {})["pallas.dev/approval"]
    assert meta["arguments"] == arguments
    assert len(meta["argumentsSha256"]) == 64


async def test_a_turn_asks_at_most_the_cap_of_questions_at_once() -> None:
    approver = Approver(wait=0.5)
    calls = [Call("db__drop_table", {"note": "n", "target": f"t{n}"}, id=f"call_{n}") for n in range(40)]
    ran, result = await ask(calls, {"tools": ["drop_*"]}, approver)
    assert not result.is_error, result
    assert ran == []
    assert approver.most_waiting <= MAX_PENDING_QUESTIONS
    assert len(approver.asked) == MAX_PENDING_QUESTIONS


async def test_a_glob_matches_tool_names_whatever_their_case_and_punctuation() -> None:
    approver = Approver()
    ran, result = await ask([Call("db__Delete-Record", {"record": "r1"})], {"tools": ["delete_*"]}, approver)
    assert not result.is_error, result
    assert len(approver.asked) == 1
    assert ran == []
