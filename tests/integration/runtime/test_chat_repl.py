"""The `pallas chat` REPL as a person and a script see it: the status line on a terminal, tool
calls dimmed, the answer after them, and the commands /tools, /system, /set and /save.

The agent (FakeOpenAI behind it, an echo server as its downstream tool) is served in the test's
event loop. The terminal cases run the installed `pallas` program on a pseudo-terminal
(`tests.support.terminal`: pexpect, and pyte for the screen); the others pipe its stdin, stdout
and stderr.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client, FastMCP

from pallas_api.config import RequestParams
from tests.integration.runtime.test_chat import pallas_chat
from tests.support.agents import QUIET_FASTMCP_ENV, ServedAgent, agent_config, pallas_argv, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Hold, Text, ToolCalls
from tests.support.mcp_servers import RunningServer, header_echo_server, serve
from tests.support.terminal import terminal

AGENT = "repl-test"
INSTRUCTION = "You are terse.\nAnswer in one line."


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
        servers=[{"name": "echo", "url": echo.url}],
    )
    async with serve_agent(config) as served:
        yield served


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
    assert lines[-4:] == [
        '[tool echo__echo_headers {"delay": 0}]',
        '[result echo__echo_headers ok: {"authorization": null, "x_api_key": null}]',
        "The answer is 42.",
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
    assert any(line.startswith("get_health()  Returns the health status") for line in lines), lines
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
        "temperature, top_p, top_k, max_tokens, stop, seed, effort",
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
