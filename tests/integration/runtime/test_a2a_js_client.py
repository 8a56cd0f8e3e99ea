"""An agent's A2A surface driven by the official JavaScript SDK (@a2a-js/sdk 1.3.0, installed by
hack/build/mcp-peers.sh), a second client nobody here wrote beside the Python a2a-sdk of
test_a2a.py: the card it resolves, a blocking send and its context continued, a streaming send's
events, a task got and cancelled, and an OIDC-protected agent refusing it without a token."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.runtime.test_access_oidc import issuer, oidc_config  # noqa: F401 - fixture
from tests.support.a2a_js import a2a_js, a2a_js_started, finished, next_line
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.mcp_peers import McpPeers
from tests.support.oidc import Issuer


def config(llm: FakeOpenAI, **extra: Any) -> Any:
    return agent_config(llm.base_url, name="harper", description="Answers questions.", **extra)


def texts(parts: list[dict[str, Any]]) -> str:
    return "".join(part.get("text", "") for part in parts)


def status_of(event: dict[str, Any]) -> str | None:
    """The state a streamed status update reports (None for other events)."""
    state: str | None = event.get("statusUpdate", {}).get("status", {}).get("state")
    return state


async def test_the_js_sdk_reads_the_card_and_continues_a_context(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers
) -> None:
    fake_openai.script(Text("Paris."), Text("About 2 million."))
    async with serve_agent(config(fake_openai, a2a={"tags": ["research"]})) as agent:
        card = (await a2a_js(mcp_peers, "card", agent.base_url)).only["card"]
        first = (await a2a_js(mcp_peers, "send", agent.base_url, "Capital of France?")).only["task"]
        second = (
            await a2a_js(mcp_peers, "send", agent.base_url, "Its population?", context_id=first["contextId"])
        ).only["task"]
    assert card["name"] == "harper"
    # The SDK asks with `A2A-Version: 1.0`: the 1.0 card, naming both versions' interfaces.
    assert card["supportedInterfaces"] == [
        {"url": f"{agent.base_url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]
    assert card["capabilities"]["streaming"] is True
    assert [(s["id"], s["tags"]) for s in card["skills"]] == [("harper", ["research"])]
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [(a["artifactId"], texts(a["parts"])) for a in first["artifacts"]] == [("answer", "Paris.")]
    assert first["metadata"]["pallas.dev/conversationId"] == first["contextId"]
    assert second["contextId"] == first["contextId"]
    assert second["id"] != first["id"]
    assert texts(second["artifacts"][0]["parts"]) == "About 2 million."
    # One conversation: the second turn's model call saw the first turn.
    contents = [m["content"] for m in fake_openai.completions[1].json["messages"]]
    assert contents[-3:] == ["Capital of France?", "Paris.", "Its population?"]


async def test_the_js_sdk_streams_working_steps_the_answer_and_completion(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers
) -> None:
    fake_openai.script(Text("One two three.", pieces=["One ", "two ", "three."], interval=0.06))
    async with serve_agent(config(fake_openai)) as agent:
        run = await a2a_js(mcp_peers, "stream", agent.base_url, "Count.")
    assert run.returncode == 0, run
    events = run.lines
    assert next(iter(events[0])) == "task"
    task = events[0]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    statuses = [e["statusUpdate"]["status"] for e in events if "statusUpdate" in e]
    assert statuses[0]["state"] == "TASK_STATE_WORKING"
    steps = [texts(s["message"]["parts"]) for s in statuses if "message" in s]
    assert "harper step 1 (llm)" in steps
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert {c["artifact"]["artifactId"] for c in chunks} == {"answer"}
    streamed = [c for c in chunks if not c.get("lastChunk")]
    assert len(streamed) >= 2
    assert not streamed[0].get("append")
    assert all(c.get("append") for c in streamed[1:])
    assert "".join(texts(c["artifact"]["parts"]) for c in streamed) == "One two three."
    assert (chunks[-1].get("lastChunk"), texts(chunks[-1]["artifact"]["parts"])) == (True, "One two three.")
    assert next(iter(events[-1])) == "statusUpdate"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {e[next(iter(e))].get("taskId", task["id"]) for e in events} == {task["id"]}


async def test_the_js_sdk_gets_and_cancels_a_running_task(
    fake_openai: FakeOpenAI, mcp_peers: McpPeers
) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, Text("too late")))
    try:
        async with (
            serve_agent(config(fake_openai)) as agent,
            a2a_js_started(mcp_peers, "stream", agent.base_url, "Think long.") as stream,
        ):
            task_id = (await next_line(stream))["task"]["id"]
            # The SDK streams an event once its task store holds it: a `get` after this sees `working`.
            while status_of(await next_line(stream)) != "TASK_STATE_WORKING":
                pass
            while not fake_openai.completions:  # noqa: ASYNC110 - the fake records, it signals nothing
                await asyncio.sleep(0.01)
            running = (await a2a_js(mcp_peers, "get", agent.base_url, task_id)).only["task"]
            cancelled = (await a2a_js(mcp_peers, "cancel", agent.base_url, task_id)).only["task"]
            streamed = await finished(stream)
            again = (await a2a_js(mcp_peers, "get", agent.base_url, task_id)).only["task"]
    finally:
        release.set()
    assert running["status"]["state"] == "TASK_STATE_WORKING"
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert again["status"]["state"] == "TASK_STATE_CANCELED"
    assert "artifacts" not in again  # the held answer never arrived
    # The streaming caller saw its task end cancelled, and its stream closed.
    assert streamed.returncode == 0, streamed
    assert streamed.lines[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_an_oidc_agent_refuses_the_js_sdk_without_a_token(
    fake_openai: FakeOpenAI,
    mcp_peers: McpPeers,
    issuer: Issuer,  # noqa: F811
) -> None:
    fake_openai.script(Text("Secret answer."))
    async with serve_agent(oidc_config(fake_openai.base_url, issuer)) as agent:
        card = (await a2a_js(mcp_peers, "card", agent.base_url)).only["card"]
        refused = await a2a_js(mcp_peers, "send", agent.base_url, "tell me")
        alice = await a2a_js(mcp_peers, "send", agent.base_url, "tell me", token=issuer.token(sub="alice"))
        task = alice.only["task"]
        bob = await a2a_js(mcp_peers, "get", agent.base_url, task["id"], token=issuer.token(sub="bob"))
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert "openIdConnectSecurityScheme" in card["securitySchemes"]["bearer"]
    assert refused.returncode == 2
    assert "Status: 401" in refused.lines[0]["error"]["message"], refused
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(task["artifacts"][0]["parts"]) == "Secret answer."
    assert len(fake_openai.completions) == 1  # the refused call never reached the model
    # Another caller's token does not reach alice's task.
    assert bob.returncode == 2
    assert bob.lines[0]["error"]["name"] == "TaskNotFoundError", bob
