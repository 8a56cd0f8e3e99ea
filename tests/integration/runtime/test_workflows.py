"""Workflows under `pallas run`: chain, parallel, router and evaluator agents over real peer agents.

One scripted FakeOpenAI thinks for every agent; its reply depends on the agent's instruction (the
system prompt), so each step's input is visible in the requests it received. A step agent answers
`<agent>: <its message>`; the router agent answers with the route its script picks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import yaml
from fastmcp import Client

from tests.integration.runtime.test_run_command import manifests as run_command_manifests
from tests.integration.runtime.test_run_command import pallas_run
from tests.support.fake_llm import FakeOpenAI, Hold, HttpError, Text
from tests.support.mcp_peers import free_ports

STEPS = ["researcher", "writer", "editor"]
WORKFLOWS: dict[str, dict[str, Any]] = {
    "chain-flow": {"chain": {"steps": ["researcher", "writer"]}},
    "cumulative-flow": {"chain": {"steps": ["researcher", "writer"], "cumulative": True}},
    "fan-flow": {"parallel": {"fanOut": ["researcher", "writer", "editor"]}},
    "fan-in-flow": {"parallel": {"fanOut": ["researcher", "writer"], "fanIn": "editor"}},
    "router-flow": {"router": {"routes": ["researcher", "writer"]}},
    "fallback-flow": {"router": {"routes": ["researcher"], "fallback": "editor"}},
    "a2a-flow": {"chain": {"steps": ["researcher", "echo"]}},  # echo: an A2A agent (`a2aAgents`)
    "plan-flow": {"planner": {"agents": ["researcher", "writer"], "maxSteps": 3}},
    "review-flow": {
        "evaluator": {"generator": "writer", "evaluator": "editor", "minRating": "GOOD", "maxRefinements": 1}
    },
}
"""Workflow agents; the first step agents are started first (they are dependencies)."""


def manifests(llm: FakeOpenAI, agents: list[str], *, budgeted: bool = False) -> list[dict[str, Any]]:
    # The Secret and the PallasDeployment `local` of `pallas run`'s own tests.
    docs = [doc for doc in run_command_manifests(llm) if doc["kind"] != "PallasAgent"]
    for name in agents:
        spec: dict[str, Any] = {"deployment": "local", "instruction": name, "description": f"the {name}"}
        if name == "editor" and budgeted:  # a small budget, spent within a few answers
            spec["budgets"] = {"perCaller": {"window": "day", "tokens": 15}}
        if name in WORKFLOWS:
            spec["workflow"] = WORKFLOWS[name]
        docs.append(
            {
                "apiVersion": "pallas.dev/v1alpha1",
                "kind": "PallasAgent",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    return docs


class Run:
    """The agents of one `pallas run`: the steps, then the workflows a test uses."""

    def __init__(self, *flows: str) -> None:
        self.agents = [*STEPS, *flows]
        self.base = free_ports(1 + len(self.agents))
        self.proc: subprocess.Popen[str] | None = None
        """The `pallas run` process, once it runs."""

    def url(self, agent: str) -> str:
        """The agent's URL: `pallas run` gives ports in manifest order after the registry's."""
        return f"http://127.0.0.1:{self.base + 1 + self.agents.index(agent)}/mcp"


def inputs(llm: FakeOpenAI, agent: str) -> list[str]:
    """What each turn of `agent` was asked (its user message), in order."""
    return [
        c.json["messages"][-1]["content"]
        for c in llm.completions
        if c.json["messages"][0]["content"] == agent
    ]


def echo(routes: dict[str, str] | None = None, failing: frozenset[str] = frozenset()) -> Any:
    """Step agents echo their message; `failing` ones fail; the router picks by `routes`."""

    def step(request: dict[str, Any]) -> Any:
        agent, said = request["messages"][0]["content"], request["messages"][-1]["content"]
        if agent in failing:
            return HttpError(400, f"{agent} is broken")
        if "router" in agent or "fallback" in agent:
            return Text(json.dumps({"route": (routes or {}).get(said, "none")}))
        return Text(f"{agent}: {said}")

    return step


async def ask(run: Run, agent: str, message: str) -> tuple[Any, list[str]]:
    """send_message to `agent` with progress followed; the raw result and the progress messages."""
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, text: str | None) -> None:
        seen.append(text or "")

    async with Client(run.url(agent)) as client:
        result = await client.call_tool_mcp(
            "send_message", {"message": message}, progress_handler=on_progress
        )
    return result, seen


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    llm: FakeOpenAI,
    *flows: str,
    budgeted: bool = False,
    log: Path | None = None,
    edit: Callable[[list[dict[str, Any]]], None] | None = None,
) -> AsyncIterator[Run]:
    """`pallas run` of the step agents and `flows`, once every agent is ready (`budgeted`: the
    editor has a small per-caller budget; `log`: where a long run's output goes, see `pallas_run`;
    `edit`: changes the manifests before they are written)."""
    run = Run(*flows)
    path = tmp_path / "workflows.yaml"
    docs = manifests(llm, run.agents, budgeted=budgeted)
    if edit is not None:
        edit(docs)
    path.write_text(yaml.safe_dump_all(docs))
    async with pallas_run(path, run.base, log=log) as proc:
        await all_ready(run)
        run.proc = proc
        yield run


READY_WITHIN = 90.0
"""Seconds for every agent to be ready: `pallas run` starts them one after another, and in the
full suite's run several other processes share the two cores."""


async def all_ready(run: Run) -> None:
    """Wait for every agent (`pallas_run` waits for the first two only); fail naming one that is not.

    It used to give up silently after 15 s, and a test then met an agent still starting (CI,
    stop 61: `httpx2.ReadError` on its first request)."""
    deadline = asyncio.get_running_loop().time() + READY_WITHIN
    async with httpx2.AsyncClient() as http:
        for agent in run.agents:
            while True:
                with contextlib.suppress(httpx2.HTTPError):
                    if (await http.get(run.url(agent).replace("/mcp", "/readyz"))).status_code == 200:
                        break
                assert asyncio.get_running_loop().time() < deadline, (
                    f"{agent} not ready within {READY_WITHIN:g}s"
                )
                await asyncio.sleep(0.05)


async def test_a_chain_hands_each_step_the_previous_answer_and_names_the_step_in_progress(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = echo()
    async with running(tmp_path, fake_openai, "chain-flow", "cumulative-flow") as run:
        result, progress = await ask(run, "chain-flow", "topic")
        cumulative, _ = await ask(run, "cumulative-flow", "subject")
    assert not result.is_error, result.content
    assert result.content[0].text == "writer: researcher: topic"
    assert inputs(fake_openai, "researcher")[0] == "topic"
    assert inputs(fake_openai, "writer")[0] == "researcher: topic"
    assert "chain researcher → writer: step 1/2 researcher…" in progress
    assert "chain researcher → writer: step 2/2 writer…" in progress
    assert progress.index("chain researcher → writer: step 2/2 writer…") > progress.index(
        "researcher/send_message: completed"
    )
    # A step's own progress reaches the caller, attributed.
    assert "writer/send_message: writer step 1 (llm)" in progress
    # Cumulative: the second step gets the message and every earlier answer, each headed.
    assert inputs(fake_openai, "writer")[1] == "subject\n\n## researcher\nresearcher: subject"
    assert cumulative.content[0].text == (
        "## researcher\nresearcher: subject\n\n"
        "## writer\nwriter: subject\n\n## researcher\nresearcher: subject"
    )


async def test_a_failing_chain_step_ends_the_workflow_naming_the_step_and_its_code(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = echo(failing=frozenset({"researcher"}))
    async with running(tmp_path, fake_openai, "chain-flow") as run:
        result, _ = await ask(run, "chain-flow", "topic")
    assert result.is_error
    text = result.content[0].text
    assert "workflow step 'researcher' failed (LLM_ERROR)" in text, text
    assert inputs(fake_openai, "writer") == []


async def test_parallel_fans_out_at_once_and_fans_in_the_rest_naming_failures(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = echo(failing=frozenset({"editor"}))
    async with running(tmp_path, fake_openai, "fan-flow", "fan-in-flow") as run:
        result, progress = await ask(run, "fan-flow", "question")
        fake_openai.default = echo()
        fanned_in, _ = await ask(run, "fan-in-flow", "q2")
    assert not result.is_error, result.content
    assert result.content[0].text == (
        "## researcher\nresearcher: question\n\n## writer\nwriter: question\n\n"
        "No answer from: editor (LLM_ERROR)"
    )
    assert "parallel: 2 of 3 answered" in progress
    assert inputs(fake_openai, "editor")[-1] == "q2\n\n## researcher\nresearcher: q2\n\n## writer\nwriter: q2"
    assert fanned_in.content[0].text.startswith("editor: q2")


async def test_a_router_sends_the_message_where_its_model_chose_else_to_fallback_or_fails(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = echo(routes={"write me a poem": "writer"})
    async with running(tmp_path, fake_openai, "router-flow", "fallback-flow") as run:
        routed, progress = await ask(run, "router-flow", "write me a poem")
        lost, _ = await ask(run, "router-flow", "unrelated")
        fallen_back, _ = await ask(run, "fallback-flow", "unrelated")
    assert routed.content[0].text == "writer: write me a poem"
    assert "router: writer…" in progress
    choice = next(
        c.json for c in fake_openai.completions if c.json["messages"][0]["content"].startswith("router")
    )
    assert choice["response_format"]["json_schema"]["schema"]["properties"]["route"]["enum"] == [
        "researcher", "writer", "none",
    ]  # fmt: skip
    assert "- writer: " in choice["messages"][0]["content"]  # the routes' descriptions
    assert lost.is_error
    assert "routes: researcher, writer" in lost.content[0].text
    assert fallen_back.content[0].text == "editor: unrelated"


async def test_an_evaluator_that_never_rates_good_returns_the_best_attempt_with_its_rating(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    ratings = iter(["FAIR", "POOR"])

    def step(request: dict[str, Any]) -> Any:
        if request["messages"][0]["content"] == "editor":
            return Text(json.dumps({"rating": next(ratings), "feedback": "more rhyme"}))
        return echo()(request)

    fake_openai.default = step
    async with running(tmp_path, fake_openai, "review-flow") as run:
        result, progress = await ask(run, "review-flow", "a poem")
    text = result.content[0].text
    assert text.startswith("writer: a poem\n\n(best of 2 attempts, rated FAIR;"), text
    refinement = inputs(fake_openai, "writer")[1]
    assert "rated FAIR" in refinement
    assert "more rhyme" in refinement
    assert "evaluator: attempt 2/2 writer…" in progress


async def test_a_cancelled_workflow_cancels_its_running_steps(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.default = echo()
    fake_openai.script(*(Hold(release) for _ in range(3)))  # the three fan-out steps' LLM calls
    async with running(tmp_path, fake_openai, "fan-flow") as run:
        call = asyncio.create_task(ask(run, "fan-flow", "stop me"))
        await asyncio.wait_for(fake_openai.holding_at_least(3), 30)  # every step's LLM call under way
        call.cancel()  # the client sends notifications/cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await call
        for _ in range(100):
            if fake_openai.abandoned == 3:
                break
            await asyncio.sleep(0.05)
        assert fake_openai.abandoned == 3, "a step's turn went on after its workflow was cancelled"
        release.set()


async def test_a_budget_spent_mid_fan_out_fails_that_step_and_the_rest_fan_in(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = echo()
    async with running(tmp_path, fake_openai, "fan-flow", budgeted=True) as run:
        for number in range(3):  # the editor's budget runs out within a few answers
            result, progress = await ask(run, "fan-flow", f"ask {number}")
            if "editor (BUDGET_EXCEEDED)" in result.content[0].text:
                break
    text = result.content[0].text
    assert not result.is_error
    assert text == (
        f"## researcher\nresearcher: ask {number}\n\n## writer\nwriter: ask {number}\n\n"
        "No answer from: editor (BUDGET_EXCEEDED)"
    )
    assert "parallel: 2 of 3 answered" in progress


async def test_repeated_chain_calls_all_answer_when_the_run_logs_to_a_file(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    # The bench's hang: a long run's DEBUG log filled the undrained output pipe (64 KiB) and
    # `pallas run` blocked on a log line; with `log` a file, every call of a long run answers.
    fake_openai.default = echo()
    async with (
        running(tmp_path, fake_openai, "chain-flow", log=tmp_path / "run.log") as run,
        Client(run.url("chain-flow")) as client,
    ):
        for number in range(60):
            # A hang is for good, so generous bounds still catch it. The first call loads the
            # provider SDK in each agent (deferred until a turn needs it): 3 s beside four busy
            # loops here, past 10 s in CI's full run.
            result = await asyncio.wait_for(
                client.call_tool_mcp("send_message", {"message": f"r{number}"}), 90 if number == 0 else 30
            )
            assert not result.is_error, result.content
    assert "connected" in (tmp_path / "run.log").read_text()
