"""`pallas chat` asks the person at the terminal when the agent's tool call needs approval.

The installed `pallas` program talks to a real agent (served in the test's loop) whose scripted
model calls a destructive tool of a fastmcp server marked `requireApproval`. On a pseudo-terminal
(`tests.support.terminal`) the question and `approve? [y/N]` appear and the answer decides; with
stdin piped there is nobody to ask, and the call is refused with that reason.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.runtime.test_approvals import ops_mcp
from tests.support.agents import QUIET_FASTMCP_ENV, ServedAgent, agent_config, pallas_argv, serve_agent
from tests.support.fake_llm import Call, FakeOpenAI, Text, ToolCalls
from tests.support.mcp_servers import serve
from tests.support.terminal import detected_env, terminal


def step(request: dict[str, Any]) -> Any:
    """Delete /tmp/x, then say what the tool answered."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Text(f"tool said: {last['content']}")
    return ToolCalls([Call("ops__delete_file", {"path": "/tmp/x"})])


@pytest.fixture
async def ran() -> list[str]:
    return []


@pytest.fixture
async def agent(fake_openai: FakeOpenAI, ran: list[str]) -> AsyncIterator[ServedAgent]:
    fake_openai.default = step
    async with serve(ops_mcp(ran)) as ops:
        config = agent_config(
            fake_openai.base_url,
            name="worker",
            servers=[{"name": "ops", "url": ops.url, "requireApproval": {"tools": ["delete_*"]}}],
        )
        async with serve_agent(config) as served:
            yield served


QUESTION = (
    'Agent worker wants to call ops/delete_file with {"path": "/tmp/x"} (requireApproval.tools delete_*).'
)


@pytest.mark.parametrize(
    ("typed", "answer"), [("y", "tool said: deleted /tmp/x"), ("n", "refused at the terminal")]
)
async def test_the_person_at_the_terminal_approves_or_refuses(
    agent: ServedAgent, ran: list[str], typed: str, answer: str
) -> None:
    async with terminal([*pallas_argv(), "chat", "-m", "clean up", agent.url], env=QUIET_FASTMCP_ENV) as term:
        await term.expect(re.escape("approve? [y/N]"))
        screen = "\n".join(term.screen())
        assert QUESTION in screen.replace("\n", ""), screen
        assert ran == []
        term.sendline(typed)
        await term.expect(re.escape(answer))
        await asyncio.to_thread(term.child.wait)
    assert ran == (["delete_file /tmp/x"] if typed == "y" else [])


async def test_without_a_terminal_the_call_is_refused_with_the_reason(
    agent: ServedAgent, ran: list[str]
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *pallas_argv(),
        "chat",
        "-m",
        "clean up",
        agent.url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=detected_env(QUIET_FASTMCP_ENV),
    )
    out, err = await asyncio.wait_for(proc.communicate(b""), 60)
    reason = "pallas chat has no terminal to ask on (stdin is not a terminal), so it refused"
    assert proc.returncode == 0, err.decode()
    assert f"pallas chat: {QUESTION} Approve? Refused: {reason}." in err.decode()
    assert out.decode().strip() == (
        f"tool said: Error: the caller rejected calling ops__delete_file: {reason}; the tool was not run"
    )
    assert ran == []
