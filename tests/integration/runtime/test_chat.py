"""`pallas chat` against a real agent (FakeOpenAI behind it).

The agent is served in the test's event loop (`serve_agent`). The one-shot, REPL and one error
case run the installed `pallas` program as an asyncio subprocess with piped stdin (so progress
arrives as plain lines on stderr); the other cases run `cli.main` on a worker thread, the same
code without the program's multi-second start-up. A downstream header-echo server with
`forwardInboundAuth` shows which Authorization the agent received from the chat client. A small
Starlette app plays the registry (and a server that is not MCP).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from pallas_runtime import cli
from tests.support.agents import QUIET_FASTMCP_ENV, ServedAgent, agent_config, pallas_argv, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, HttpError, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, header_echo_server, serve_app
from tests.support.ports import closed_port

AGENT = "chat-test"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


async def pallas_chat_in_thread(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """`pallas chat ARGS` through `cli.main` on a worker thread (its own event loop): the same code
    path without the program's start-up time, for cases that need no stdin."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["chat", *args])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


async def pallas_chat(*args: str, stdin: str = "", limit: float = 60) -> Result:
    """Run `pallas chat ARGS` to completion without blocking the event loop."""
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(),
        "chat",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **QUIET_FASTMCP_ENV},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), limit)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def echo() -> AsyncIterator[RunningServer]:
    async with header_echo_server() as server:
        yield server


@pytest.fixture
async def agent(fake_openai: FakeOpenAI, echo: RunningServer) -> AsyncIterator[ServedAgent]:
    config = agent_config(
        fake_openai.base_url,
        name=AGENT,
        servers=[{"name": "echo", "url": echo.url, "forwardInboundAuth": True}],
    )
    async with serve_agent(config) as served:
        yield served


def catalogue(entries: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """A server.json document listing `(server name, url)` entries, as the registry serves it."""
    return {
        "servers": [
            {
                "server": {
                    "name": name,
                    "description": "an agent",
                    "version": "1.0.0",
                    "remotes": [{"type": "streamable-http", "url": url}],
                },
                "_meta": {"io.modelcontextprotocol.registry/official": {"status": "active"}},
            }
            for name, url in entries
        ]
    }


@pytest.fixture
async def registry(agent: ServedAgent) -> AsyncIterator[RunningServer]:
    """A stand-in registry listing the agent (and one more), plus an HTML page at /page."""
    document = catalogue(
        [("local.cluster.svc.agents/other", "http://127.0.0.1:1/mcp"), (f"a.b/{AGENT}", agent.url)]
    )

    async def server_json(_: Request) -> Response:
        return JSONResponse(document)

    async def page(_: Request) -> Response:
        return HTMLResponse("<html><body>not MCP</body></html>")

    app = Starlette(
        routes=[
            Route("/.well-known/mcp/server.json", server_json),
            Route("/page", page, methods=["GET", "POST", "DELETE"]),
        ]
    )
    async with serve_app(app, path="") as server:
        yield server


def tool_text_reply(request_json: dict[str, Any]) -> Text:
    """The LLM's second turn: answer with the text of the tool result it was given."""
    return Text(f"echo said {request_json['messages'][-1]['content']}")


async def test_one_shot_prints_the_answer_and_progress(agent: ServedAgent, fake_openai: FakeOpenAI):
    fake_openai.script(ToolCalls([Call("echo__echo_headers", {"delay": 0})]), tool_text_reply)

    res = await pallas_chat("-m", "Who is calling?", "--bearer", "alice-token", agent.url)

    assert res.code == 0, res.err
    answer = json.loads(res.out.removeprefix("echo said "))
    assert answer["authorization"] == "Bearer alice-token"
    # Progress: plain lines on stderr (not a terminal), in the agent's formats and in order, then
    # the tool call with its arguments and result.
    assert res.err_lines == [
        f"… {AGENT} step 1 (llm)",
        f"… {AGENT} step 2 (tool)",
        "… echo/echo_headers: started",
        "… echo/echo_headers: completed",
        f"… {AGENT} step 3 (llm)",
        '[tool echo__echo_headers {"delay": 0}]',
        f"[result echo__echo_headers ok: {res.out.removeprefix('echo said ').strip()}]",
    ]
    assert fake_openai.completions[0].json["messages"][-1] == {"role": "user", "content": "Who is calling?"}


async def test_one_shot_progress_is_flushed_before_the_answer(agent: ServedAgent, fake_openai: FakeOpenAI):
    """stdout and stderr into one pipe (`2>&1 | less`): the progress lines come first."""
    fake_openai.script(Text("The end."))
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(),
        "chat",
        "-m",
        "hi",
        agent.url,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **QUIET_FASTMCP_ENV},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)

    assert proc.returncode == 0
    assert out.decode().splitlines() == [f"… {AGENT} step 1 (llm)", "The end."]


async def test_json_prints_the_raw_result(agent: ServedAgent, fake_openai: FakeOpenAI):
    fake_openai.script(
        ToolCalls([Call("echo__echo_headers", {"delay": 0})]), Text("Done."), HttpError(500, "down")
    )

    res = await pallas_chat("-m", "hi", "--json", "--conversation-id", "c-9", agent.url)

    assert res.code == 0, res.err
    document = json.loads(res.out)
    assert document["content"] == [{"type": "text", "text": "Done."}]
    assert document["isError"] is False
    assert document["_meta"]["pallas.dev/conversationId"] == "c-9"
    (call,) = document["_meta"]["pallas.dev/toolCalls"]
    assert (call["name"], call["arguments"], call["isError"]) == ("echo__echo_headers", {"delay": 0}, False)
    assert f"… {AGENT} step 1 (llm)" in res.err_lines  # progress stays on stderr

    failed = await pallas_chat("-m", "again", "--json", agent.url)
    assert failed.code == 1
    document = json.loads(failed.out)
    assert document["isError"] is True
    assert document["content"][0]["text"].startswith("the language model call failed")

    usage = await pallas_chat("--json", agent.url)
    assert (usage.code, usage.out) == (2, "")
    assert usage.err_lines == ["pallas chat: --json needs -m MESSAGE (the REPL prints text)"]


async def test_header_option_sets_the_authorization(
    agent: ServedAgent, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
):
    fake_openai.script(ToolCalls([Call("echo__echo_headers", {"delay": 0})]), tool_text_reply)

    res = await pallas_chat_in_thread(capsys, "-m", "hi", "--header", "Authorization: Bearer bob", agent.url)

    assert res.code == 0, res.err
    assert json.loads(res.out.removeprefix("echo said "))["authorization"] == "Bearer bob"


async def test_conversation_id_continues_a_conversation(
    agent: ServedAgent, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
):
    fake_openai.script(Text("First."), Text("Second."))

    for message in ("one", "two"):
        res = await pallas_chat_in_thread(capsys, "--conversation-id", "c-1", "-m", message, agent.url)
        assert res.code == 0, res.err

    second = fake_openai.completions[1].json["messages"]
    assert [m["content"] for m in second if m["role"] != "system"] == ["one", "First.", "two"]


async def test_repl_keeps_history_and_clears_it(agent: ServedAgent, fake_openai: FakeOpenAI):
    fake_openai.script(Text("Hello there."), Text("Still here."))

    res = await pallas_chat(agent.url, stdin="hello\nagain\n/history\n/clear\n/history\n/quit\nnever sent\n")

    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        "Hello there.",
        "Still here.",
        "user: hello",
        "assistant: Hello there.",
        "user: again",
        "assistant: Still here.",
        "(no messages in this conversation yet)",
    ]
    assert "(new conversation)" in res.err_lines
    # The second turn carried the first: one conversation across the session.
    second = fake_openai.completions[1].json["messages"]
    assert [m["content"] for m in second if m["role"] != "system"] == ["hello", "Hello there.", "again"]
    assert len(fake_openai.completions) == 2, "/quit must stop before the next line"


async def test_repl_lists_resumes_and_deletes_threads(agent: ServedAgent, fake_openai: FakeOpenAI):
    fake_openai.default = Text("noted")
    first = await pallas_chat(agent.url, "--conversation-id", "kept", stdin="remember the alamo\n")
    assert first.code == 0, first.err

    res = await pallas_chat(
        agent.url,
        stdin="a new one\n/threads\n/resume kept\nwhat did I say?\n/delete\n/threads\n/resume\n/quit\n",
    )

    assert res.code == 0, res.err
    listed = [line for line in res.out.splitlines() if "messages" in line]
    assert len(listed) == 3, res.out  # two before the delete, one after
    before = listed[:2]
    kept = next(line for line in before if " kept " in line)
    assert kept.startswith("  kept")  # not the current one
    assert kept.endswith("remember the alamo")
    current = next(line for line in before if line is not kept)
    assert current.startswith("* chat-")
    assert current.endswith("a new one")
    # Resumed: the next turn carried the old conversation.
    resumed = fake_openai.completions[-1].json["messages"]
    assert [m["content"] for m in resumed if m["role"] == "user"] == ["remember the alamo", "what did I say?"]
    assert "(continuing conversation kept)" in res.err_lines
    assert "(deleted conversation kept)" in res.err_lines
    assert "usage: /resume ID (the ids are in /threads)" in res.err_lines
    assert listed[2].endswith("a new one")  # and kept is gone


async def test_repl_ends_at_end_of_input_and_survives_a_failed_message(
    agent: ServedAgent, fake_openai: FakeOpenAI
):
    fake_openai.script(HttpError(500, "model down"), Text("Back again."))

    res = await pallas_chat(agent.url, stdin="first\nsecond\n/bogus\n")

    assert res.code == 0, res.err
    assert res.out.splitlines() == ["Back again."]
    assert any(line.startswith("pallas chat: the agent answered with an error:") for line in res.err_lines)
    assert any(line.startswith("unknown command /bogus") for line in res.err_lines)


async def test_agent_name_resolves_through_the_registry(
    agent: ServedAgent, registry: RunningServer, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
):
    fake_openai.script(Text("Found you."))
    base = f"http://127.0.0.1:{registry.port}"

    res = await pallas_chat_in_thread(capsys, "--registry", base, AGENT, "-m", "hi")
    assert res.code == 0, res.err
    assert res.out == "Found you.\n"

    # The catalogue URL itself (as PallasDeployment status.registryURL gives it) works too.
    fake_openai.script(Text("Again."))
    res = await pallas_chat_in_thread(
        capsys, "--registry", f"{base}/.well-known/mcp/server.json", AGENT, "-m", "hi"
    )
    assert (res.code, res.out) == (0, "Again.\n"), res.err


async def test_agent_missing_from_the_registry_lists_the_names(
    registry: RunningServer, capsys: pytest.CaptureFixture[str]
):
    res = await pallas_chat_in_thread(
        capsys, "--registry", f"http://127.0.0.1:{registry.port}", "nobody", "-m", "hi"
    )

    assert res.code == 1
    assert res.err_lines == [
        f"pallas chat: agent 'nobody' is not in the registry at http://127.0.0.1:{registry.port}"
        f"/.well-known/mcp/server.json (available: {AGENT}, other)"
    ]


async def test_tool_error_exits_non_zero(
    agent: ServedAgent, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
):
    fake_openai.script(HttpError(500, "model down"))

    res = await pallas_chat_in_thread(capsys, "-m", "hi", agent.url)

    assert res.code == 1
    assert res.out == ""
    # Progress lines come first (and, in this process, the agent's own log line).
    errors = [line for line in res.err_lines if line.startswith("pallas chat:")]
    assert len(errors) == 1, res.err
    assert errors[0].startswith(
        "pallas chat: the agent answered with an error: the language model call failed"
    )


async def test_unreachable_url_exits_non_zero():
    # Through the installed program: the exit code is the process's.
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        res = await pallas_chat("-m", "hi", url)

    assert res.code == 1
    assert len(res.err_lines) == 1, res.err
    assert res.err_lines[0].startswith(f"pallas chat: cannot connect to {url}"), res.err


async def test_a_web_page_is_not_an_mcp_server(registry: RunningServer, capsys: pytest.CaptureFixture[str]):
    url = f"http://127.0.0.1:{registry.port}/page"

    res = await pallas_chat_in_thread(capsys, "-m", "hi", url)

    assert res.code == 1
    assert len(res.err_lines) == 1, res.err
    assert res.err_lines[0].startswith(f"pallas chat: {url} is not an MCP server"), res.err


async def test_unreachable_registry_and_bad_arguments(capsys: pytest.CaptureFixture[str]):
    with closed_port() as port:
        res = await pallas_chat_in_thread(capsys, "--registry", f"http://127.0.0.1:{port}", "x", "-m", "hi")
    assert res.code == 1
    assert len(res.err_lines) == 1, res.err
    assert res.err_lines[0].startswith("pallas chat: cannot reach the registry at"), res.err

    res = await pallas_chat_in_thread(capsys, "research", "-m", "hi")
    assert res.code == 2
    assert res.err_lines == [
        "pallas chat: 'research' is not an http(s) URL; to use an agent name, add --registry URL"
    ]

    res = await pallas_chat_in_thread(capsys, "--header", "no-colon", "-m", "hi", "http://127.0.0.1:1/mcp")
    assert res.code == 2
    assert res.err_lines == ["pallas chat: --header 'no-colon': expected 'Name: value'"]

    res = await pallas_chat_in_thread(
        capsys, "--header", "authorization: x", "--bearer", "t", "-m", "hi", "http://127.0.0.1:1/mcp"
    )
    assert res.code == 2
    assert res.err_lines == ["pallas chat: give either --token or an Authorization --header, not both"]
