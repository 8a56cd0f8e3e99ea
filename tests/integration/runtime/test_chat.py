"""`pallas chat` against a real agent (FakeOpenAI behind it).

The agent is served in the test's event loop (`serve_agent`). The one-shot, REPL and one error
case run the installed `pallas` program as an asyncio subprocess with piped stdin (so progress
arrives as plain lines on stderr); the other cases run `cli.main` on a worker thread, the same
code without the program's multi-second start-up. A downstream header-echo server with
`forwardInboundAuth` shows which Authorization the agent received from the chat client. A small
Starlette app plays the registry (and a server that is not MCP).

The REPL cases at the end show what a person and a script see: the status line on a terminal
(the installed program on a pseudo-terminal, `tests.support.terminal`: pexpect, and pyte for the
screen), tool calls dimmed, the answer after them, and the commands /tools, /system, /set, /save.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client, FastMCP
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from pallas_api.fields import RequestParams
from pallas_runtime import cli
from tests.support.agents import QUIET_FASTMCP_ENV, ServedAgent, agent_config, pallas_argv, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Hold, HttpError, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, header_echo_server, serve, serve_app
from tests.support.ports import closed_port
from tests.support.terminal import detected_env, terminal

AGENT = "chat-test"
INSTRUCTION = "You are terse.\nAnswer in one line."


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
        env=detected_env(QUIET_FASTMCP_ENV),
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
        instruction=INSTRUCTION,
        servers=[{"name": "echo", "url": echo.url, "forwardInboundAuth": True}],
        # A single-user desktop agent: one person, every chat of theirs listed in /threads.
        conversations={"scope": "caller"},
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
    # The server got exactly the caller's bearer: the agent scrubs it from what tools echo.
    assert answer["authorization"] == "[redacted]"
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
        env=detected_env(QUIET_FASTMCP_ENV),
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
    # Exactly the header's value reached the server (echoed, it is scrubbed as the caller's).
    assert json.loads(res.out.removeprefix("echo said "))["authorization"] == "[redacted]"


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


# --- the REPL as a person and a script see it -----------------------------------------------


async def test_the_status_line_shows_progress_and_is_gone_when_the_answer_prints(
    agent: ServedAgent, fake_openai: FakeOpenAI
):
    release = asyncio.Event()
    fake_openai.script(
        ToolCalls([Call("echo__echo_headers", {"delay": 0})]),
        Hold(release, then=Text("The answer is 42.")),  # a slow second LLM turn
    )
    async with terminal([*pallas_argv(), "chat", agent.url], env=QUIET_FASTMCP_ENV) as term:
        await term.expect("you> ")
        term.sendline("what is it?")
        await fake_openai.holding_at_least(1)
        await term.expect(re.escape(f"{AGENT} step 3 (llm)"))
        working = term.screen()
        status = [line for line in working if f"{AGENT} step 3 (llm)" in line]
        assert len(status) == 1, working
        assert "The answer is 42." not in "\n".join(working)

        release.set()
        await term.expect(r"The answer is 42\.")
        await term.expect("you> ")
        answered = term.screen()

    text = "\n".join(answered)
    assert "step 3 (llm)" not in text, answered  # the status line was erased
    assert "waiting for the agent" not in text, answered
    lines = [line for line in answered if line]
    # The answer streamed in as it was written (and is not printed twice); the turn's tool calls
    # follow it.
    assert lines[-4:] == [
        "The answer is 42.",
        '[tool echo__echo_headers {"delay": 0}]',
        '[result echo__echo_headers ok: {"authorization": null, "x_api_key": null}]',
        "you>",
    ], answered
    # The tool lines are dimmed (SGR 2), the answer is not.
    assert b'\x1b[2m[tool echo__echo_headers {"delay": 0}]' in term.raw
    assert b"\x1b[2mThe answer is 42." not in term.raw


async def test_one_message_on_a_terminal_shows_progress_before_the_answer(
    agent: ServedAgent, fake_openai: FakeOpenAI
):
    release = asyncio.Event()
    fake_openai.script(Hold(release, then=Text("Done.")))
    async with terminal([*pallas_argv(), "chat", "-m", "go", agent.url], env=QUIET_FASTMCP_ENV) as term:
        await fake_openai.holding_at_least(1)
        await term.expect(re.escape(f"{AGENT} step 1 (llm)"))
        release.set()
        await term.expect("Done.")
        await asyncio.to_thread(term.child.wait)
    assert term.raw.index(f"{AGENT} step 1 (llm)".encode()) < term.raw.index(b"Done.")
    assert [line for line in term.screen() if line] == ["Done."]


async def test_tools_lists_the_agents_tools(agent: ServedAgent):
    res = await pallas_chat(agent.url, stdin="/tools\n")

    assert res.code == 0, res.err
    lines = res.out.splitlines()
    send = next(line for line in lines if line.startswith("send_message("))
    assert send.startswith("send_message(message, images?, conversation_id?")
    assert any(line.startswith(f"{AGENT}(message, ") for line in lines), lines  # the alias
    assert any(line.startswith("get_health(diagnostics?)  Returns the health status") for line in lines), (
        lines
    )
    assert any(line.startswith("list_conversations()") for line in lines), lines


async def test_system_shows_the_instruction(agent: ServedAgent):
    res = await pallas_chat(agent.url, stdin="/system\n")

    assert res.code == 0, res.err
    assert res.out == INSTRUCTION + "\n"


async def test_set_validates_locally_and_says_what_it_sends(agent: ServedAgent, fake_openai: FakeOpenAI):
    fake_openai.script(Text("ok"))

    res = await pallas_chat(
        agent.url,
        stdin="/set temprature 1\n/set temperature 5\n/set stop END\n/set temperature 0.3\n/set\nhi\n",
    )

    assert res.code == 0, res.err
    errors = [line for line in res.err_lines if line.startswith("pallas chat: /set:")]
    assert errors == [
        "pallas chat: /set: unknown parameter 'temprature'; the parameters are "
        "temperature, top_p, top_k, max_tokens, stop, seed, effort, presence_penalty, "
        "frequency_penalty, response_format, tool_choice, extra, model, system_append, system_override, "
        "tools_allowlist, messages",
        "pallas chat: /set: temperature: Input should be less than or equal to 2",
        "pallas chat: /set: stop: Input should be a valid list",
    ]
    assert res.out.splitlines() == ['{"temperature": 0.3}', "ok"]
    (request,) = fake_openai.completions
    schema = next(t for t in await agent_tools(agent) if t["name"] == "send_message")["inputSchema"]
    if "params" in schema["properties"]:  # the agent takes per-call params: they reach the model
        assert "every message now carries params" in res.err
        assert request.json["temperature"] == 0.3
    else:  # an agent without them: said plainly, and nothing unknown is sent
        assert any("send_message takes no params" in line for line in res.err_lines), res.err
        assert "temperature" not in request.json


async def agent_tools(agent: ServedAgent) -> list[dict[str, Any]]:
    async with Client(agent.url) as client:
        return [t.model_dump(by_alias=True) for t in await client.list_tools()]


def params_agent(received: list[Any], alias: bool) -> FastMCP:
    """A stand-in agent whose send_message takes `params` (camelCase names when `alias`)."""
    mcp = FastMCP("params-agent")

    if alias:

        @mcp.tool(output_schema=None)
        async def send_message(
            message: str, conversation_id: str | None = None, params: RequestParams | None = None
        ) -> str:
            received.append(params.model_dump(by_alias=True, exclude_none=True) if params else None)
            return "noted"
    else:

        @mcp.tool(output_schema=None)
        async def send_message(  # type: ignore[no-redef]
            message: str, conversation_id: str | None = None, params: dict[str, Any] | None = None
        ) -> str:
            received.append(params)
            return "noted"

    return mcp


@pytest.mark.parametrize("alias", [False, True], ids=["snake_case", "camelCase"])
async def test_set_params_go_with_the_next_message_under_the_schemas_names(alias: bool):
    received: list[Any] = []
    async with serve(params_agent(received, alias)) as stand_in:
        res = await pallas_chat(
            stand_in.url,
            stdin="/set temperature 0.3\n/set topP 0.5\n/set seed null\none\n/set top_p null\ntwo\n",
        )

    assert res.code == 0, res.err
    assert res.out.splitlines() == ["noted", "noted"]
    top_p = "topP" if alias else "top_p"
    assert received == [{"temperature": 0.3, top_p: 0.5}, {"temperature": 0.3}]
    assert f'every message now carries params {{"temperature": 0.3, "{top_p}": 0.5}}' in res.err_lines


async def test_save_writes_the_transcript(agent: ServedAgent, fake_openai: FakeOpenAI, tmp_path: Path):
    fake_openai.script(Text("Hello there."), Text("Still here."))
    text, document = tmp_path / "chat.txt", tmp_path / "chat.json"

    res = await pallas_chat(
        agent.url, stdin=f"hello\nagain\n/save {text}\n/save {document}\n/save {tmp_path}/no/such/dir.txt\n"
    )

    assert res.code == 0, res.err
    assert f"(saved 4 messages to {text})" in res.err_lines
    body = text.read_text()
    assert body.startswith(f"# {AGENT}, conversation chat-")
    assert body.endswith(
        "user: hello\n\nassistant: Hello there.\n\nuser: again\n\nassistant: Still here.\n\n"
    )
    saved = json.loads(document.read_text())
    assert saved["agent"] == AGENT
    assert saved["conversationId"].startswith("chat-")
    assert saved["messages"] == [
        {"role": "user", "text": "hello"},
        {"role": "assistant", "text": "Hello there."},
        {"role": "user", "text": "again"},
        {"role": "assistant", "text": "Still here."},
    ]
    assert any(
        line.startswith(f"pallas chat: cannot write {tmp_path}/no/such/dir.txt: No such file")
        for line in res.err_lines
    ), res.err
