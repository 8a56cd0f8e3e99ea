"""An agent's A2A surface driven by the a2a-sdk's own client (docs/api.md §3 "A2A"): the card,
a blocking and a streaming send mapped onto the agent's turn and conversations, a task
cancelled, failures with their codes, access control, and the surface turned off."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from a2a.helpers import get_artifact_text
from a2a.types import CancelTaskRequest, GetTaskRequest, Role, TaskState
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from pallas_runtime.metrics import RuntimeMetrics
from tests.integration.runtime.test_access_oidc import issuer, oidc_config  # noqa: F401 - fixture
from tests.support.a2a_clients import a2a_client, final_task, stream_events, text_request
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.oidc import Issuer


def config(llm: FakeOpenAI, **extra: Any) -> Any:
    return agent_config(llm.base_url, name="harper", description="Answers questions.", **extra)


async def test_the_card_names_the_agent_its_endpoint_and_skill(fake_openai: FakeOpenAI) -> None:
    async with (
        serve_agent(config(fake_openai, a2a={"tags": ["research"]})) as agent,
        httpx.AsyncClient() as http,
    ):
        card = (
            await http.get(f"{agent.base_url}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        ).json()
    assert card["name"] == "harper"
    assert card["description"] == "Answers questions."
    assert card["supportedInterfaces"] == [
        {"url": f"{agent.base_url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]
    assert "url" not in card  # the 0.3 fields go to clients that do not say 1.0
    assert card["capabilities"]["streaming"] is True
    assert [(s["id"], s["tags"]) for s in card["skills"]] == [("harper", ["research"])]
    assert "securitySchemes" not in card  # an open agent asks for nothing


async def test_a_blocking_send_is_a_turn_and_the_context_is_its_conversation(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Text("Paris."), Text("About 2 million."))
    metrics = RuntimeMetrics()
    async with (
        serve_agent(config(fake_openai), metrics=metrics) as agent,
        a2a_client(agent.base_url) as client,
    ):
        first = await final_task(client, text_request("Capital of France?"))
        second = await final_task(client, text_request("Its population?", context_id=first.context_id))
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in first.artifacts] == ["Paris."]
    assert MessageToDict(first.metadata)["pallas.dev/conversationId"] == first.context_id
    assert get_artifact_text(second.artifacts[0]) == "About 2 million."
    # One conversation: the second turn's model call saw the first turn.
    contents = [m["content"] for m in fake_openai.completions[1].json["messages"]]
    assert contents[-3:] == ["Capital of France?", "Paris.", "Its population?"]
    assert metrics.send_message_total.labels("harper", "ok")._value.get() == 2
    # A blocking send follows no progress: the model's text is not streamed, no step is recorded.
    assert not fake_openai.completions[0].json.get("stream")
    assert [m.parts[0].text for m in first.history if m.role == Role.ROLE_AGENT] == []


async def test_streaming_sends_steps_as_status_and_text_as_the_answer_artifact(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(Text("One two three.", pieces=["One ", "two ", "three."], interval=0.06))
    async with (
        serve_agent(config(fake_openai)) as agent,
        a2a_client(agent.base_url, streaming=True) as client,
    ):
        events = await stream_events(client, text_request("Count."))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    assert kinds[-1] == "status_update"
    statuses = [e.status_update for e in events if e.HasField("status_update")]
    assert statuses[-1].status.state == TaskState.TASK_STATE_COMPLETED
    steps = [s.status.message.parts[0].text for s in statuses if s.status.message.parts]
    assert "harper step 1 (llm)" in steps
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert all(c.artifact.artifact_id == "answer" for c in chunks)
    streamed = [c for c in chunks if not c.last_chunk]
    assert len(streamed) >= 2
    assert not streamed[0].append
    assert all(c.append for c in streamed[1:])
    assert "".join(get_artifact_text(c.artifact) for c in streamed) == "One two three."
    assert (chunks[-1].last_chunk, chunks[-1].append, get_artifact_text(chunks[-1].artifact)) == (
        True, False, "One two three.",
    )  # fmt: skip


async def test_a_cancelled_task_ends_canceled_and_keeps_nothing(fake_openai: FakeOpenAI) -> None:
    release = asyncio.Event()
    fake_openai.script(Hold(release, Text("too late")), Text("Fresh start."))
    async with serve_agent(config(fake_openai)) as agent:
        async with a2a_client(agent.base_url, streaming=True) as client:
            stream = client.send_message(text_request("Think long."))
            first = await anext(stream)
            task_id, context_id = first.task.id, first.task.context_id
            while not fake_openai.completions:  # noqa: ASYNC110 - the fake records, it signals nothing
                await asyncio.sleep(0.01)
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            await stream.aclose()
            release.set()
            again = await client.get_task(GetTaskRequest(id=task_id))
        async with a2a_client(agent.base_url) as blocking:
            after = await final_task(blocking, text_request("Hello?", context_id=context_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    assert get_artifact_text(after.artifacts[0]) == "Fresh start."
    # The cancelled turn stored nothing: the next one's model call sees only itself.
    said = [m["content"] for m in fake_openai.completions[-1].json["messages"] if m["role"] != "system"]
    assert said == ["Hello?"]


async def test_failures_carry_the_send_message_codes(fake_openai: FakeOpenAI) -> None:
    async with serve_agent(config(fake_openai, maxDepth=2)) as agent, a2a_client(agent.base_url) as client:
        looped = await final_task(client, text_request("hi", metadata={"pallas.dev/callPath": ["harper"]}))
        too_deep = await final_task(
            client, text_request("hi", metadata={"pallas.dev/callPath": ["a", "b"], "pallas.dev/hops": 2})
        )
    assert looped.status.state == TaskState.TASK_STATE_REJECTED
    assert MessageToDict(looped.metadata)["pallas.dev/error"]["code"] == "LOOP_DETECTED"
    assert "already in this call's path" in looped.status.message.parts[0].text
    assert MessageToDict(too_deep.metadata)["pallas.dev/error"]["code"] == "MAX_DEPTH"
    assert fake_openai.completions == []


async def test_a_task_is_its_callers_alone(fake_openai: FakeOpenAI, issuer: Issuer) -> None:  # noqa: F811
    fake_openai.script(Text("Secret answer."))
    cfg = oidc_config(fake_openai.base_url, issuer)
    alice, bob = f"Bearer {issuer.token(sub='alice')}", f"Bearer {issuer.token(sub='bob')}"
    async with serve_agent(cfg) as agent:
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{agent.base_url}/.well-known/agent-card.json")).json()
            refused = await http.post(
                f"{agent.base_url}/a2a",
                json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
                headers={"A2A-Version": "1.0"},
            )
        assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
        assert "openIdConnectSecurityScheme" in card["securitySchemes"]["bearer"]
        assert refused.status_code == 401
        assert "resource_metadata=" in refused.headers["www-authenticate"]
        async with a2a_client(agent.base_url, bearer=alice) as as_alice:
            task = await final_task(as_alice, text_request("tell me"))
        async with a2a_client(agent.base_url, bearer=bob) as as_bob:
            with pytest.raises(TaskNotFoundError):
                await as_bob.get_task(GetTaskRequest(id=task.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a2a_off_serves_neither_card_nor_endpoint(fake_openai: FakeOpenAI) -> None:
    async with serve_agent(config(fake_openai, a2a={"enabled": False})) as agent, httpx.AsyncClient() as http:
        card = await http.get(f"{agent.base_url}/.well-known/agent-card.json")
        rpc = await http.post(f"{agent.base_url}/a2a", json={})
    assert (card.status_code, rpc.status_code) == (404, 404)
