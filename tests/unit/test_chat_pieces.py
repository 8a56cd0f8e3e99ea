"""Pure pieces of `pallas chat`: /set's checks and wire names, tool lines, a turn's tool trace."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pytest

from pallas_runtime.agent.trace import RESULT_TEXT_LIMIT, tool_trace
from pallas_runtime.commands.chat.display import TurnDisplay, tool_lines
from pallas_runtime.commands.chat.link import AgentLink
from pallas_runtime.commands.chat.params import ParamsError, accepted_params, checked, wire_params
from pallas_runtime.commands.chat.session import ChatSession
from pallas_runtime.messages import (
    AssistantMessage,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)


def test_set_takes_both_spellings_json_values_and_null() -> None:
    assert checked("temperature", "0.2") == ("temperature", 0.2)
    assert checked("topP", "0.5") == ("top_p", 0.5)
    assert checked("stop", '["END", "STOP"]') == ("stop", ["END", "STOP"])
    assert checked("effort", "high") == ("effort", "high")  # not JSON: a string
    assert checked("seed", "null") == ("seed", None)


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("temp", "1", "unknown parameter 'temp'; the parameters are temperature, top_p"),
        ("top_k", "0", "top_k: Input should be greater than 0"),
        ("effort", "huge", "effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"),
    ],
)
def test_set_refuses_naming_the_key(key: str, raw: str, message: str) -> None:
    with pytest.raises(ParamsError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        checked(key, raw)


def test_params_go_by_the_names_the_schema_uses() -> None:
    assert accepted_params({"properties": {"message": {}}}) is None
    snake = {"properties": {"params": {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]}}}
    snake["$defs"] = {"P": {"properties": {"temperature": {}, "top_p": {}}}}
    assert accepted_params(snake) == {"temperature", "top_p"}
    camel = {"properties": {"params": {"properties": {"temperature": {}, "topP": {}}}}}
    assert wire_params({"temperature": 1.0, "top_p": 0.5}, accepted_params(camel) or set()) == {
        "temperature": 1.0,
        "topP": 0.5,
    }
    assert wire_params({"top_p": 0.5}, set()) == {"top_p": 0.5}  # an open object: field names


def test_a_turns_tool_trace_and_its_lines() -> None:
    long = "x" * (RESULT_TEXT_LIMIT + 5)
    turn = [
        UserMessage((TextPart("hi"),)),
        AssistantMessage(
            "",
            (
                ToolCall("1", "search__find", {"q": "cats"}),
                ToolCall("2", "search__find", {}, arguments_error="not a JSON object"),
            ),
        ),
        ToolResultsMessage(
            (
                ToolResult("1", "search__find", (TextPart(long),)),
                ToolResult("2", "search__find", (TextPart("bad arguments"),), is_error=True),
            )
        ),
        AssistantMessage("", (ToolCall("3", "slow__wait", {}),)),  # cut short: no result
    ]
    trace = tool_trace(turn)
    assert trace[0]["result"] == "x" * RESULT_TEXT_LIMIT + "… (5 more characters)"
    assert trace[1] == {
        "name": "search__find",
        "arguments": {},
        "argumentsError": "not a JSON object",
        "isError": True,
        "result": "bad arguments",
    }
    assert trace[2] == {"name": "slow__wait", "arguments": {}}
    lines = tool_lines(trace)
    assert lines[0] == '[tool search__find {"q": "cats"}]'
    assert lines[1].startswith("[result search__find ok: xxx")
    assert lines[1].endswith("…]")
    assert lines[2:] == [
        "[tool search__find (bad arguments: not a JSON object)]",
        "[result search__find error: bad arguments]",
        "[tool slow__wait {}]",
    ]


@dataclass
class _ReadOnlyHistory(ChatSession):
    """A chat session whose conversation is given (what the agent's history prompt would show)."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    async def messages(self) -> list[tuple[str, str]]:
        return self.lines


@pytest.mark.parametrize(
    ("lines", "answer"),
    [
        ([("user", "hi"), ("assistant", "[tool call] x__y {}"), ("assistant", "hello")], "hello"),
        ([("user", "older"), ("assistant", "yes"), ("user", "hi")], None),  # not answered (yet)
        ([("user", "hi"), ("assistant", "[turn failed] AGENT_SHUTTING_DOWN: the agent stopped")], None),
        ([("user", "hi"), ("assistant", "hello"), ("user", "other")], None),  # not the last message
        ([], None),  # the agent kept nothing (a new process with a memory store)
    ],
)
async def test_after_a_dropped_connection_only_a_stored_answer_to_the_last_message_counts(
    lines: list[tuple[str, str]], answer: str | None
) -> None:
    session = _ReadOnlyHistory(
        link=AgentLink("http://127.0.0.1:1/mcp", {}, 1.0),
        agent="a",
        display=TurnDisplay(io.StringIO()),
        timeout=1.0,
        conversation_id="c-1",
        lines=lines,
    )
    assert await session._stored_answer("hi") == answer
