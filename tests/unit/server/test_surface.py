"""The agent's whole MCP surface, driven in memory with fastmcp's `Client(server)`.

Tools, their schemas and descriptions, the error codes, the history prompt, the instruction
resource and the conversation tools: real MCP (JSON-RPC through fastmcp and the SDK's session)
with no port, no uvicorn and a scripted provider in place of the model. What needs the network
(the routes, sessions, request limits, the provider SDKs' own wire) stays in
tests/integration/runtime.

The golden file golden/surface.yaml is the reviewed `tools/list`, `prompts/list` and
`resources/list`; `PALLAS_UPDATE_GOLDEN=1 pytest ...` rewrites it after an intended change (then
read the diff before committing).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import yaml
from fastmcp import Client
from fastmcp.client.messages import MessageHandler
from mcp.shared.exceptions import MCPError

from pallas_api.config import AgentConfig, parse_config
from pallas_api.errors import RETRYABLE
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import Completion, Message
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.server import AgentServer, build_server
from tests.unit.agent.doubles import FakeSource, ScriptedProvider, calls, text

GOLDEN = Path(__file__).parent / "golden" / "surface.yaml"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
AUTH_OIDC = {
    "mode": "oidc",
    "namespace": "agents",
    "resource": "https://harper.example/mcp",
    "oidc": {"issuer": "https://issuer.example", "audience": "pallas"},
}


def config(**fields: Any) -> AgentConfig:
    """A small valid agent config; `fields` are top-level file fields in camelCase."""
    return parse_config(
        {
            "name": "harper",
            "model": "m",
            "provider": {"name": "p", "type": "openai"},
            "instruction": "You help.",
            **fields,
        }
    )


@dataclass
class InMemory:
    """An agent server and a client connected to it in memory."""

    client: Client[Any]
    server: AgentServer
    provider: ScriptedProvider
    metrics: RuntimeMetrics

    def count(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@asynccontextmanager
async def in_memory(
    script: Sequence[Completion | LLMError] = (),
    *,
    provider: ScriptedProvider | None = None,
    sources: Sequence[FakeSource] = (),
    message_handler: MessageHandler | None = None,
    **fields: Any,
) -> AsyncIterator[InMemory]:
    """`build_server` over a scripted provider, its lifespan run by an in-memory client."""
    provider = provider or ScriptedProvider(list(script))
    metrics = RuntimeMetrics(process_collectors=False)
    server = build_server(config(**fields), metrics=metrics, provider=provider, sources=sources, environ={})
    async with Client(server.mcp, message_handler=message_handler) as client:
        yield InMemory(client, server, provider, metrics)


def error_of(result: Any) -> tuple[str, str]:
    """The code and message of an error result, after checking its shape (docs/api.md §3)."""
    assert result.is_error
    (content,) = result.content
    error = result.structured_content["error"]
    retryable = error["code"] in RETRYABLE
    shape = {
        "code": error["code"],
        "message": content.text,
        "retryable": retryable,
        "category": error["category"],
    }
    assert error["category"] in ("request", "config", "upstream", "internal")
    if "processed" in error:  # only ever false, and only on a retryable refusal
        assert retryable
        shape["processed"] = False
    assert error == shape
    return error["code"], content.text


def wire(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Listed components as sent, without fastmcp's own `_meta` (its tags)."""
    dumped = [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]
    return [{k: v for k, v in d.items() if k != "_meta"} for d in dumped]


# --- what is offered ----------------------------------------------------------------------------


async def test_tools_prompt_and_resource_are_the_reviewed_ones() -> None:
    async with in_memory(title="Harper", description="Answers questions.") as agent:
        surface = {
            "tools": wire(await agent.client.list_tools()),
            "prompts": wire(await agent.client.list_prompts()),
            "resources": wire(await agent.client.list_resources()),
        }
    if os.environ.get("PALLAS_UPDATE_GOLDEN"):
        GOLDEN.write_text(yaml.safe_dump(surface, sort_keys=False, width=100))
    assert GOLDEN.exists(), f"{GOLDEN} missing: run with PALLAS_UPDATE_GOLDEN=1 and review it"
    assert yaml.safe_load(GOLDEN.read_text()) == surface, f"the MCP surface differs from {GOLDEN}"


async def test_the_surface_in_brief() -> None:
    """What golden/surface.yaml holds, in the words of docs/api.md §3."""
    async with in_memory() as agent:
        tools = {t.name: t for t in await agent.client.list_tools()}
        (prompt,) = await agent.client.list_prompts()
        (resource,) = await agent.client.list_resources()
    assert list(tools) == [
        "send_message",
        "harper",
        "get_health",
        "create_conversation",
        "list_conversations",
        "delete_conversation",
    ]
    send = tools["send_message"].input_schema
    assert (send["required"], send["additionalProperties"]) == (["message"], False)
    assert list(send["properties"]) == ["message", "images", "conversation_id", "params"]
    assert tools["harper"].input_schema == send
    assert tools["harper"].description == tools["send_message"].description
    assert tools["delete_conversation"].input_schema["required"] == ["conversation_id"]
    assert list(tools["create_conversation"].input_schema["properties"]) == ["metadata"]
    assert list(tools["get_health"].input_schema["properties"]) == ["diagnostics"]
    assert all(t.output_schema is None for t in tools.values())
    assert (prompt.name, [(a.name, a.required) for a in prompt.arguments or []]) == (
        "harper_history",
        [("conversation_id", False)],
    )
    assert (str(resource.uri), resource.mime_type) == ("pallas://instruction", "text/plain")


CALLER = (
    " Without conversation_id you continue your one default conversation with this agent, from any "
    "session. Pass another conversation_id to keep a separate conversation."
)
SESSION = (
    " Without conversation_id the conversation is this MCP session's own; pass the same conversation_id "
    "to continue a conversation across sessions."
)
REQUEST = " This agent keeps no conversations: every message starts afresh."
SHARED_DEFAULT = " This agent does not identify its callers: every client continues the same conversation."
SHARED_ID = (
    " This agent does not identify its callers: a conversation_id is shared by everyone who knows it, "
    "so choose one nobody can guess."
)
LISTS = (
    "Your conversations with this agent, most recent first: id, title (the start of the first message), "
    "last turn time and message count. Continue one by passing its id as conversation_id."
)
ONLY_THIS_SESSION = (
    " This agent does not identify its callers, so it lists only the conversations this MCP session "
    "started or named."
)


@pytest.mark.parametrize(
    ("scope", "auth", "scope_sentences", "listed"),
    [
        ("caller", None, CALLER + SHARED_DEFAULT, LISTS),
        ("session", None, SESSION + SHARED_ID, LISTS + ONLY_THIS_SESSION),
        ("request", None, REQUEST, LISTS + ONLY_THIS_SESSION),
        ("caller", AUTH_OIDC, CALLER, LISTS),
        ("session", AUTH_OIDC, SESSION, LISTS),
        ("request", AUTH_OIDC, REQUEST, LISTS),
    ],
)
async def test_descriptions_say_who_the_agent_is_what_the_scope_keeps_and_what_an_id_shares(
    scope: str, auth: dict[str, Any] | None, scope_sentences: str, listed: str
) -> None:
    fields: dict[str, Any] = {"conversations": {"scope": scope}, **({"auth": auth} if auth else {})}
    async with in_memory(title="Paper Finder", description="Finds papers.", **fields) as agent:
        tools = {t.name: t.description for t in await agent.client.list_tools()}
    assert tools["send_message"] == (
        "Paper Finder: Finds papers. Send a message (optionally with images) to this agent and get its "
        "answer. params (optional) overrides the agent's request parameters for this call; null clears one."
        + scope_sentences
    )
    assert tools["list_conversations"] == listed


# --- send_message and its alias -----------------------------------------------------------------


async def test_the_alias_is_send_message_one_conversation_one_set_of_metrics() -> None:
    async with in_memory([text("by alias"), text("by name")]) as agent:
        aliased = await agent.client.call_tool_mcp("harper", {"message": "hi", "conversation_id": "c-1"})
        named = await agent.client.call_tool_mcp(
            "send_message", {"message": "again", "conversation_id": "c-1"}
        )
        bad = await agent.client.call_tool_mcp("harper", {"message": "hi", "bogus": 1})
    assert (aliased.is_error, aliased.content[0].text) == (False, "by alias")
    assert (named.is_error, named.content[0].text) == (False, "by name")
    assert aliased.meta["pallas.dev/conversationId"] == named.meta["pallas.dev/conversationId"] == "c-1"
    # One conversation whichever name was called: the second turn was sent with the first.
    _, second_turn, _ = agent.provider.calls[1]
    assert [texts(m) for m in second_turn] == ["hi", "by alias", "again"]
    assert error_of(bad) == (
        "INVALID_ARGUMENTS",
        "harper: invalid arguments: bogus: Unexpected keyword argument",
    )
    assert agent.count("pallas_send_message_total", agent="harper", outcome="ok") == 2
    assert agent.count("pallas_send_message_total", agent="harper", outcome="error") == 1
    assert agent.count("pallas_send_message_duration_seconds_count", agent="harper") == 3


def texts(message: Message) -> str:
    return getattr(message, "text", None) or "".join(getattr(p, "text", "") for p in message.content)  # type: ignore[union-attr]


BAD_ARGUMENTS = [
    ({"message": ""}, "message is empty"),
    ({"message": "x" * 2048}, "message is 2048 bytes; the limit is 1024"),
    (
        {"message": "hi", "images": [{"data": "%%%", "mime_type": "image/png"}]},
        "images[0]: data is not valid base64",
    ),
    (
        {"message": "hi", "images": [{"data": PNG, "mime_type": "image/bmp"}]},
        "images[0]: unsupported type 'image/bmp'; accepted: image/png, image/jpeg, image/gif, image/webp",
    ),
    (
        {"message": "hi", "images": [{"data": PNG, "mime_type": "image/png"}] * 3},
        "3 images attached; the limit is 2",
    ),
    ({"message": "hi", "bogus": 1}, "send_message: invalid arguments: bogus: Unexpected keyword argument"),
    ({"message": 5}, "send_message: invalid arguments: message: Input should be a valid string"),
    ({}, "send_message: invalid arguments: message: Missing required argument"),
    (
        {"message": "hi", "images": [{"data": PNG}]},
        "send_message: invalid arguments: images.0.mime_type: Field required",
    ),
    (
        {"message": "hi", "params": {"temperature": 9}},
        "send_message: invalid arguments: params.temperature: Input should be less than or equal to 2",
    ),
    (
        {"message": "hi", "params": {"extra": {"n": 128}}},
        "params.extra.n: this agent does not let a call set it (spec.callParams.extra: none)",
    ),
    (
        {"message": "hi", "conversation_id": "x" * 257},
        "conversation_id is 257 characters long; the limit is 256",
    ),
    (
        {"message": "hi", "conversation_id": "a\nb"},
        "conversation_id must be printable text without control characters",
    ),
]


async def test_bad_arguments_are_invalid_arguments_naming_the_field_and_nothing_reaches_the_model() -> None:
    limits = {"maxMessageBytes": 1024, "maxImages": 2}
    async with in_memory([text("still here")], capabilities={"vision": True}, limits=limits) as agent:
        results = [await agent.client.call_tool_mcp("send_message", args) for args, _ in BAD_ARGUMENTS]
        ok = await agent.client.call_tool_mcp("send_message", {"message": "still there?"})
    for (arguments, expected), result in zip(BAD_ARGUMENTS, results, strict=True):
        code, message = error_of(result)
        assert code == "INVALID_ARGUMENTS", arguments
        assert message == expected, arguments
        assert "pydantic.dev" not in message
        assert "input_value" not in message
    assert not ok.is_error
    assert len(agent.provider.calls) == 1  # only the good call reached the model
    assert agent.count("pallas_send_message_total", agent="harper", outcome="error") == len(BAD_ARGUMENTS)


async def test_images_to_a_model_without_vision_are_refused() -> None:
    async with in_memory() as agent:
        result = await agent.client.call_tool_mcp(
            "send_message", {"message": "look", "images": [{"data": PNG, "mime_type": "image/png"}]}
        )
    code, message = error_of(result)
    assert code == "INVALID_ARGUMENTS"
    assert "does not accept images" in message
    assert agent.provider.calls == []


async def test_an_unknown_tool_is_tool_not_found_with_fastmcps_text() -> None:
    async with in_memory() as agent:
        result = await agent.client.call_tool_mcp("no_such_tool", {})
    assert error_of(result) == ("TOOL_NOT_FOUND", "Unknown tool: 'no_such_tool'")


async def test_model_failures_end_the_call_with_their_codes() -> None:
    async with in_memory([LLMError("openai provider 'p': HTTP 503")]) as agent:
        failed = await agent.client.call_tool_mcp("send_message", {"message": "hi"})
    async with in_memory([calls("nothing__here"), calls("nothing__here")], maxIterations=2) as agent:
        looping = await agent.client.call_tool_mcp("send_message", {"message": "loop"})
    assert error_of(failed) == ("LLM_ERROR", "the language model call failed: openai provider 'p': HTTP 503")
    code, message = error_of(looping)
    assert code == "MAX_ITERATIONS"
    assert message.startswith("agent harper stopped after 2 LLM/tool rounds")


@pytest.mark.parametrize(
    ("meta", "code", "message"),
    [
        (
            {"pallas.dev/callPath": ["boss", "harper"]},
            "LOOP_DETECTED",
            "agent harper is already in this call's path (boss → harper → harper)",
        ),
        ({"pallas.dev/callPath": ["a", "b"], "pallas.dev/hops": 2}, "MAX_DEPTH", "its maxDepth is 2"),
        ({"pallas.dev/callPath": "boss"}, "INVALID_ARGUMENTS", "_meta pallas.dev/callPath must be a list"),
    ],
)
async def test_call_paths_that_loop_or_run_too_deep_are_refused_before_the_model(
    meta: dict[str, Any], code: str, message: str
) -> None:
    async with in_memory(maxDepth=2) as agent:
        result = await agent.client.call_tool_mcp("send_message", {"message": "hi"}, meta=meta)
    assert error_of(result)[0] == code
    assert message in error_of(result)[1]
    assert agent.provider.calls == []


async def test_the_result_names_its_conversation_and_lists_tool_calls_only_when_asked() -> None:
    echo = FakeSource("echo", ["ping"])
    script = [calls("echo__ping"), text("Done."), calls("echo__ping"), text("Again.")]
    async with in_memory(script, sources=[echo], conversations={"scope": "caller"}) as agent:
        asked = await agent.client.call_tool_mcp(
            "send_message", {"message": "hi"}, meta={"pallas.dev/toolCalls": True}
        )
        plain = await agent.client.call_tool_mcp("send_message", {"message": "hi", "conversation_id": "c-2"})
    assert asked.content[0].text == "Done."
    assert asked.meta["pallas.dev/conversationId"] == "default"
    (traced,) = asked.meta["pallas.dev/toolCalls"]
    assert (traced["name"], traced["arguments"], traced["isError"]) == ("echo__ping", {}, False)
    assert traced["result"] == "ping:[]:None"
    assert plain.meta["pallas.dev/conversationId"] == "c-2"
    assert "pallas.dev/toolCalls" not in plain.meta


async def test_progress_only_with_a_token() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    script = [calls("echo__ping"), text("done"), text("quiet")]
    async with in_memory(script, sources=[FakeSource("echo", ["ping"])]) as agent:
        await agent.client.call_tool("send_message", {"message": "go"}, progress_handler=on_progress)
        told = list(seen)
        await agent.client.call_tool_mcp("send_message", {"message": "again"})
    # MCP: progress increases with every notification; the seed's formats are in the messages.
    assert told == [
        (1, None, "harper step 1 (llm)"),
        (2, None, "harper step 2 (tool)"),
        (3, None, "echo/ping: started"),
        (4, None, "echo/ping: halfway"),
        (5, None, "echo/ping: completed"),
        (6, None, "harper step 3 (llm)"),
        (7, None, "harper text: done"),
    ]
    assert seen == told  # the call without a progress token was told nothing


class ProgressChunks(MessageHandler):
    """Every progress notification's line and typed chunk (`_meta["pallas.dev/chunk"]`), as sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, dict[str, Any] | None]] = []

    async def on_progress(self, message: mcp_types.ProgressNotification) -> None:
        self.seen.append((message.params.message, (message.params.meta or {}).get("pallas.dev/chunk")))


async def test_a_caller_asking_for_chunks_gets_its_tool_calls_as_typed_chunks_as_they_happen() -> None:
    """Seed M: a tool call's arguments and its result stream as they happen, then the turn's index."""
    script = [calls("echo__ping", args="plato"), text("done"), text("again"), text("quiet")]
    chunks = ProgressChunks()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    structured = {"pallas.dev/chunks": True}
    async with in_memory(script, sources=[FakeSource("echo", ["ping"])], message_handler=chunks) as agent:
        for _ in range(2):
            await agent.client.call_tool(
                "send_message", {"message": "go", "conversation_id": "c-1"},
                progress_handler=on_progress, meta=structured,
            )  # fmt: skip
        first = chunks.seen[:]
        await agent.client.call_tool("send_message", {"message": "plain"}, progress_handler=on_progress)
        plain = chunks.seen[len(first) :]
    typed = [chunk for _, chunk in first if chunk is not None]
    assert typed == [
        {"type": "toolCall", "id": "id0", "name": "echo__ping", "arguments": {"q": "plato"}},
        {
            "type": "toolResult",
            "id": "id0",
            "name": "echo__ping",
            "isError": False,
            "result": "ping:[('q', 'plato')]:None",
        },
        {"type": "final", "conversationId": "c-1", "turnIndex": 0},
        {"type": "final", "conversationId": "c-1", "turnIndex": 1},
    ]
    lines = [line for line, chunk in first if chunk is not None]
    assert lines == ["echo/ping: started", "echo/ping: completed", "harper turn 0 done", "harper turn 1 done"]
    assert plain
    assert all(chunk is None for _, chunk in plain)  # not asked: the lines alone
    assert not [line for line, _ in plain if line and line.endswith("done")]


async def test_a_request_scoped_agent_keeps_nothing_and_says_so() -> None:
    async with in_memory([text("once")], conversations={"scope": "request"}) as agent:
        result = await agent.client.call_tool_mcp("send_message", {"message": "hi", "conversation_id": "c-1"})
        listed = await agent.client.call_tool_mcp("list_conversations", {})
        with pytest.raises(MCPError, match="this agent keeps no conversations"):
            await agent.client.get_prompt("harper_history")
    assert result.content[0].text == "once"
    assert "pallas.dev/conversationId" not in (result.meta or {})
    assert json.loads(listed.content[0].text) == {"conversations": []}


# --- the conversation tools ---------------------------------------------------------------------

UTC_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def test_list_and_delete_conversations() -> None:
    script = [text("one"), text("two"), text("three")]
    async with in_memory(script, conversations={"scope": "caller"}) as agent:
        c = agent.client
        await c.call_tool_mcp("send_message", {"message": "first words", "conversation_id": "older"})
        await c.call_tool_mcp("send_message", {"message": "more words", "conversation_id": "newer"})
        await c.call_tool_mcp("send_message", {"message": "and again", "conversation_id": "newer"})
        listed = json.loads((await c.call_tool_mcp("list_conversations", {})).content[0].text)
        deleted = await c.call_tool_mcp("delete_conversation", {"conversation_id": "older"})
        again = await c.call_tool_mcp("delete_conversation", {"conversation_id": "older"})
        bad_id = await c.call_tool_mcp("delete_conversation", {"conversation_id": "x" * 257})
        no_id = await c.call_tool_mcp("delete_conversation", {})
        after = json.loads((await c.call_tool_mcp("list_conversations", {})).content[0].text)
    rows = listed["conversations"]
    assert [(r["id"], r["title"], r["messageCount"]) for r in rows] == [
        ("newer", "more words", 4),
        ("older", "first words", 2),
    ]
    assert all(UTC_TIMESTAMP.match(r["updatedAt"]) for r in rows)
    assert (deleted.is_error, deleted.content[0].text) == (False, "deleted conversation 'older'")
    assert error_of(again) == ("NOT_FOUND", "no stored conversation for conversation_id 'older'")
    assert error_of(bad_id) == (
        "INVALID_ARGUMENTS",
        "conversation_id is 257 characters long; the limit is 256",
    )
    assert error_of(no_id) == (
        "INVALID_ARGUMENTS",
        "delete_conversation: invalid arguments: conversation_id: Missing required argument",
    )
    assert [r["id"] for r in after["conversations"]] == ["newer"]
    assert agent.count("pallas_active_conversations", agent="harper") == 1


async def test_an_anonymous_client_without_a_session_lists_nothing_it_did_not_name() -> None:
    """Scope `session` without auth: no session id in memory, so nothing is enumerable."""
    async with in_memory([text("one")]) as agent:
        await agent.client.call_tool_mcp("send_message", {"message": "hi", "conversation_id": "c-1"})
        listed = await agent.client.call_tool_mcp("list_conversations", {})
        deleted = await agent.client.call_tool_mcp("delete_conversation", {"conversation_id": "c-1"})
    assert json.loads(listed.content[0].text) == {"conversations": []}
    assert error_of(deleted) == ("NOT_FOUND", "no stored conversation for conversation_id 'c-1'")


# --- the history prompt and the instruction resource --------------------------------------------


@pytest.mark.parametrize(
    ("script", "fields", "code"),
    [
        ([calls("echo__ping", args="pong"), LLMError("openai provider 'p': HTTP 503")], {}, "LLM_ERROR"),
        ([calls("echo__ping", args="pong")], {"maxIterations": 1}, "MAX_ITERATIONS"),
    ],
)
async def test_a_failed_turn_is_kept_with_the_rounds_it_ran_and_the_failure(
    script: list[Any], fields: dict[str, Any], code: str
) -> None:
    """Seed M: the thread is the auditable trail: what the turn did before it failed, then why."""
    async with in_memory([*script, text("next")], sources=[FakeSource("echo", ["ping"])], **fields) as agent:
        failed = await agent.client.call_tool_mcp("send_message", {"message": "go", "conversation_id": "c"})
        history = await agent.client.get_prompt("harper_history", {"conversation_id": "c"})
    failed_code, message = error_of(failed)
    assert [(m.role, m.content.text) for m in history.messages] == [  # type: ignore[union-attr]
        ("user", "go"),
        ("assistant", '[tool call] echo__ping {"q": "pong"}'),
        ("assistant", "[tool result] echo__ping: ping:[('q', 'pong')]:None"),
        ("assistant", f"[turn failed] {code}: {message}"),
    ]
    assert failed_code == code


async def test_the_history_prompt_shows_text_images_and_tool_activity() -> None:
    echo = FakeSource("echo", ["ping"])
    script = [calls("echo__ping", args="pong"), text("first answer"), text("by id")]
    fields = {"capabilities": {"vision": True}, "conversations": {"scope": "caller"}}
    async with in_memory(script, sources=[echo], **fields) as agent:
        c = agent.client
        await c.call_tool_mcp(
            "send_message", {"message": "one", "images": [{"data": PNG, "mime_type": "image/png"}]}
        )
        await c.call_tool_mcp("send_message", {"message": "three", "conversation_id": "c-1"})
        default = await c.get_prompt("harper_history")
        by_id = await c.get_prompt("harper_history", {"conversation_id": "c-1"})
    shown = [(m.role, getattr(m.content, "text", None) or m.content.type) for m in default.messages]
    assert shown == [
        ("user", "one"),
        ("user", "image"),
        ("assistant", '[tool call] echo__ping {"q": "pong"}'),
        ("assistant", "[tool result] echo__ping: ping:[('q', 'pong')]:None"),
        ("assistant", "first answer"),
    ]
    assert default.messages[1].content.data == PNG  # type: ignore[union-attr]
    assert [m.content.text for m in by_id.messages] == ["three", "by id"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "error", "code"),
    [
        ({}, "no stored conversation for your default conversation yet", "NOT_FOUND"),
        ({"conversation_id": "nope"}, "no stored conversation for conversation_id 'nope' yet", "NOT_FOUND"),
        (
            {"conversation_id": "x" * 257},
            "conversation_id is 257 characters long; the limit is 256",
            "INVALID_ARGUMENTS",
        ),
    ],
)
async def test_history_prompt_errors_are_coded_and_one_info_line_without_a_traceback(
    arguments: dict[str, str], error: str, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with in_memory(conversations={"scope": "caller"}) as agent:
        caplog.clear()  # the start's own lines
        with caplog.at_level(logging.DEBUG), pytest.raises(MCPError, match=re.escape(error)) as raised:
            await agent.client.get_prompt("harper_history", arguments)
    # Seed 004: the error carries its code and category, as the tools' errors do.
    category = "upstream" if code == "NOT_FOUND" else "request"
    assert raised.value.error.code == -32602  # invalid params: what the request named
    assert raised.value.error.data == {
        "code": code,
        "message": error,
        "retryable": False,
        "category": category,
    }
    ours = [r for r in caplog.records if r.name == "pallas.server"]
    assert [(r.levelno, r.getMessage()) for r in ours] == [(logging.INFO, f"harper_history failed: {error}")]
    assert all(r.exc_info is None for r in caplog.records if r.levelno >= logging.INFO)


async def test_the_instruction_is_a_text_resource() -> None:
    async with in_memory(instruction="Answer in French.") as agent:
        (content,) = await agent.client.read_resource("pallas://instruction")
    assert (content.text, content.mime_type) == ("Answer in French.", "text/plain")  # type: ignore[union-attr]


# --- health and shutdown ------------------------------------------------------------------------


async def test_get_health_is_one_json_text_and_never_calls_the_model() -> None:
    async with in_memory(sources=[FakeSource("echo", ["ping"])], busyAt=1) as agent:
        result = await agent.client.call_tool_mcp("get_health", {})
        diagnosed = await agent.client.call_tool_mcp("get_health", {"diagnostics": True})
    report = json.loads(result.content[0].text)
    assert (result.is_error, report["status"], report["busy"], report["inFlight"]) == (False, "ok", False, 0)
    assert "diagnostics" not in report
    diagnostics = json.loads(diagnosed.content[0].text)["diagnostics"]
    assert diagnostics["servers"] == [{"name": "echo", "up": True}]
    assert diagnostics["reloads"] == {"applied": 0, "refused": 0, "invalid": 0}
    assert agent.provider.calls == []


# --- per-turn controls (seed M: toolsAllowlist, systemOverride) --------------------------------


async def test_tools_allowlist_narrows_that_calls_tools_only() -> None:
    argos = FakeSource("argos", ["search", "fetch"])
    async with in_memory([text("a"), text("b"), text("c")], sources=[argos]) as agent:
        narrowed = {"message": "x", "params": {"toolsAllowlist": ["argos__se*"]}}
        await agent.client.call_tool("send_message", narrowed)
        await agent.client.call_tool("send_message", {"message": "y"})
        await agent.client.call_tool("send_message", {"message": "z", "params": {"toolsAllowlist": []}})
    offered = [sorted(spec.name for spec in tools) for _, _, tools in agent.provider.calls]
    assert offered == [["argos__search"], ["argos__fetch", "argos__search"], []]


async def test_tools_allowlist_never_widens_the_agents_policy() -> None:
    argos = FakeSource("argos", ["search", "fetch"])
    async with in_memory([text("a")], sources=[argos], tools={"deny": ["argos__fetch"]}) as agent:
        await agent.client.call_tool("send_message", {"message": "x", "params": {"toolsAllowlist": ["*"]}})
    ((_, _, tools),) = agent.provider.calls
    assert [spec.name for spec in tools] == ["argos__search"]


async def test_system_override_only_where_call_params_allow_names_it() -> None:
    params = {"systemOverride": "You are Zed.", "systemAppend": "Be brief."}
    async with in_memory([text("a")]) as agent:
        refused = await agent.client.call_tool_mcp("send_message", {"message": "x", "params": params})
    assert refused.is_error
    assert "params.systemOverride: this agent does not let a call set it" in refused.content[0].text
    assert agent.provider.calls == []
    allow = ["systemOverride", "systemAppend"]
    async with in_memory([text("a"), text("b")], callParams={"allow": allow}) as agent:
        await agent.client.call_tool("send_message", {"message": "x", "params": params})
        await agent.client.call_tool("send_message", {"message": "y"})
    (first, _, _), (second, _, _) = agent.provider.calls
    assert first == "You are Zed.\n\nBe brief."
    assert second == config().instruction  # that call only


async def test_a_calls_own_history_replaces_the_stored_one_only_where_call_params_allow_names_it() -> None:
    """Seed M: `params.messages` is the call's history; the stored conversation is neither read nor kept."""
    given = [{"role": "user", "text": "Who wrote The Republic?"}, {"role": "assistant", "text": "Plato."}]
    async with in_memory([text("a")]) as agent:
        refused = await agent.client.call_tool_mcp(
            "send_message", {"message": "And The Laws?", "params": {"messages": given}}
        )
    assert refused.is_error
    assert "params.messages: this agent does not let a call set it" in refused.content[0].text
    assert agent.provider.calls == []
    async with in_memory(
        [text("stored"), text("Plato too."), text("later")], callParams={"allow": ["messages"]}
    ) as agent:
        await agent.client.call_tool("send_message", {"message": "Kept question", "conversation_id": "c1"})
        both = await agent.client.call_tool_mcp(
            "send_message", {"message": "x", "conversation_id": "c1", "params": {"messages": given}}
        )
        answer = await agent.client.call_tool(
            "send_message", {"message": "And The Laws?", "params": {"messages": given}}
        )
        await agent.client.call_tool("send_message", {"message": "Next", "conversation_id": "c1"})
    assert both.is_error
    assert "params.messages replaces a conversation's history: send it without conversation_id" in (
        both.content[0].text
    )
    assert answer.content[0].text == "Plato too."
    assert "pallas.dev/conversationId" not in (answer.meta or {})  # nothing kept
    _, (_, history, _), (_, later, _) = agent.provider.calls
    assert [(m.role, getattr(m, "text", None)) for m in history] == [
        ("user", None),
        ("assistant", "Plato."),
        ("user", None),
    ]
    assert [m.content[0].text for m in history if m.role == "user"] == [
        "Who wrote The Republic?",
        "And The Laws?",
    ]
    # The stored conversation saw none of it.
    assert [m.content[0].text for m in later if m.role == "user"] == ["Kept question", "Next"]


async def test_the_deployments_shared_prompts_come_before_the_instruction() -> None:
    """Seed M: the system block holds the project's prompts, then the agent's; systemAppend last."""
    shared = ["House rules.", "Project context."]
    allow = ["systemOverride", "systemAppend"]
    async with in_memory([text("a"), text("b")], prompts=shared, callParams={"allow": allow}) as agent:
        await agent.client.call_tool(
            "send_message", {"message": "x", "params": {"systemAppend": "Be brief."}}
        )
        await agent.client.call_tool("send_message", {"message": "y", "params": {"systemOverride": "Zed."}})
    (first, _, _), (second, _, _) = agent.provider.calls
    assert first == "House rules.\n\nProject context.\n\nYou help.\n\nBe brief."
    assert second == "House rules.\n\nProject context.\n\nZed."  # the override replaces the agent's own
