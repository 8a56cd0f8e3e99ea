"""A2A tasks of an open agent (`auth.mode: none`): owned like MCP conversations, bounded in bytes.

Without inbound auth every A2A client was the one anonymous caller, so `ListTasks` listed every
client's tasks with their text, answer and `contextId`, and that id then continued the
conversation over MCP: the leak MCP closed in issue 24, reopened through A2A. Now an anonymous
client of an agent that keeps conversations per session is listed nothing (an A2A request has no
session to remember what it started, as an MCP request without one is listed nothing); a task
stays reachable by its id, which only its client was told. And the tasks kept were bounded by
count alone (1,000 tasks of up to 4 MiB each); now their bytes are bounded too.
"""

from __future__ import annotations

from a2a.helpers import get_artifact_text
from a2a.types import GetTaskRequest, ListTasksRequest, TaskState
from a2a.utils.errors import TaskNotFoundError
from fastmcp import Client

from pallas_runtime.server.a2a.tasks import MAX_TASK_BYTES
from tests.support.a2a_clients import a2a_client, final_task, text_request
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text


async def test_an_anonymous_client_lists_no_other_clients_tasks() -> None:
    async with (
        FakeOpenAI(default=Text("The launch code is 0000.")) as llm,
        serve_agent(agent_config(llm.base_url)) as agent,
    ):
        async with a2a_client(agent.base_url) as alice:
            mine = await final_task(alice, text_request("Alice's secret plan"))
        async with a2a_client(agent.base_url) as mallory:
            listed = await mallory.list_tasks(ListTasksRequest(include_artifacts=True))
        text = str(listed)
        assert list(listed.tasks) == [], text
        assert mine.context_id not in text
        assert "secret plan" not in text
        # The task stays Alice's to read by the id she was given.
        async with a2a_client(agent.base_url) as alice_again:
            again = await alice_again.get_task(GetTaskRequest(id=mine.id))
        assert get_artifact_text(again.artifacts[0]) == "The launch code is 0000."
        # Nothing to continue over MCP either: this client's session names no conversation.
        async with Client(agent.url) as mcp:
            threads = await mcp.call_tool("list_conversations", {})
        assert mine.context_id not in str(threads.content)


async def test_the_tasks_kept_are_bounded_in_bytes() -> None:
    piece = 512 * 1024  # a turn takes at most 1 MiB of message
    count = MAX_TASK_BYTES // piece + 4  # well under the count limit (1,000)
    async with (
        FakeOpenAI(default=Text("ok")) as llm,
        serve_agent(agent_config(llm.base_url)) as agent,
        a2a_client(agent.base_url) as client,
    ):
        tasks = [await final_task(client, text_request(f"{n} " + "x" * piece)) for n in range(count)]
        try:
            await client.get_task(GetTaskRequest(id=tasks[0].id))
        except TaskNotFoundError:
            first_kept = False
        else:
            first_kept = True
        newest = await client.get_task(GetTaskRequest(id=tasks[-1].id))
    assert not first_kept, f"{count} tasks of 512 KiB kept: the oldest must have gone"
    assert newest.status.state == TaskState.TASK_STATE_COMPLETED, str(newest.status)[:2000]
    assert get_artifact_text(newest.artifacts[0]) == "ok"
