"""A2A 1.0 and 0.3 side by side on one agent (docs/api.md §3 "A2A beside MCP"), each with its client.

The 0.3 client is the a2a-sdk's own 0.3 transport, made the way a 0.3 client is made: from the
card as a 0.3 client reads it (validated by the SDK's 0.3 model), which names only the 0.3
interface. The 1.0 client is the a2a-sdk's, made from the card it reads. Each is watched on the
wire: the methods it sends and the `A2A-Version` it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory, create_client
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.compat.v0_3 import types as v03
from a2a.compat.v0_3.conversions import to_core_agent_card
from a2a.helpers import get_artifact_text
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, TaskState

from tests.integration.runtime.test_access_oidc import issuer, oidc_config  # noqa: F401 - fixture
from tests.support.a2a_clients import a2a_client, final_task, stream_events, text_request
from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Hold, Text
from tests.support.oidc import Issuer

CARD = "/.well-known/agent-card.json"


class Wire:
    """What a client sent: (JSON-RPC method, A2A-Version header) per POST."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def record(self, request: httpx.Request) -> None:
        if request.method == "POST":
            method = json.loads(request.content)["method"]
            self.calls.append((method, request.headers.get("A2A-Version")))


@contextlib.asynccontextmanager
async def legacy_client(base_url: str, wire: Wire, *, streaming: bool = False) -> AsyncIterator[Client]:
    """An A2A 0.3 client: the card read as 0.3 (no version said), the SDK's 0.3 transport."""
    async with httpx.AsyncClient(timeout=30, event_hooks={"request": [wire.record]}) as http:
        raw = (await http.get(f"{base_url}{CARD}")).json()
        card = v03.AgentCard.model_validate(raw)  # a valid 0.3 card, or this raises
        assert (card.url, card.protocol_version, card.preferred_transport) == (
            f"{base_url}/a2a", "0.3", "JSONRPC",
        )  # fmt: skip
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(
            to_core_agent_card(card)
        )
        try:
            yield client
        finally:
            await client.close()


def config(llm: FakeOpenAI, **extra: Any) -> Any:
    return agent_config(llm.base_url, name="harper", description="Answers questions.", **extra)


async def test_a_0_3_client_sends_streams_gets_and_cancels_on_the_same_endpoint(
    fake_openai: FakeOpenAI,
) -> None:
    release = asyncio.Event()
    fake_openai.script(
        Text("Paris."), Text("About 2 million."), Text("One two three."), Hold(release, Text("too late"))
    )
    wire = Wire()
    async with serve_agent(config(fake_openai)) as agent:
        async with legacy_client(agent.base_url, wire) as client:
            first = await final_task(client, text_request("Capital of France?"))
            second = await final_task(client, text_request("Its population?", context_id=first.context_id))
            again = await client.get_task(GetTaskRequest(id=first.id))
        async with legacy_client(agent.base_url, wire, streaming=True) as client:
            events = await stream_events(client, text_request("Count to three."))
            stream = client.send_message(text_request("Think long."))
            task_id = (await anext(stream)).task.id
            while len(fake_openai.completions) < 4:  # noqa: ASYNC110 - the fake records, it signals nothing
                await asyncio.sleep(0.01)
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            await stream.aclose()
            release.set()
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(first.artifacts[0]) == "Paris."
    assert get_artifact_text(second.artifacts[0]) == "About 2 million."
    assert second.context_id == first.context_id
    # One conversation: the second turn's model call saw the first turn.
    contents = [m["content"] for m in fake_openai.completions[1].json["messages"]]
    assert contents[-3:] == ["Capital of France?", "Paris.", "Its population?"]
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    # The 0.3 client spoke 0.3 on the wire: its method names, and no version said.
    assert {method for method, _ in wire.calls} == {
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
    }
    assert {version for _, version in wire.calls} == {"0.3"}


async def test_the_card_and_the_endpoint_answer_each_version_as_it_asks(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = lambda request: Text("ok")
    async with serve_agent(config(fake_openai)) as agent, httpx.AsyncClient() as http:
        modern = await http.get(f"{agent.base_url}{CARD}", headers={"A2A-Version": "1.0"})
        legacy = await http.get(f"{agent.base_url}{CARD}")
        url = f"{agent.base_url}/a2a"
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        v1 = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}},
            headers={"A2A-Version": "1.0"},
        )
        v1_name_as_0_3 = await http.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": message}}
        )
        legacy_message = {
            "messageId": "m2",
            "role": "user",
            "kind": "message",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        v03_send = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": legacy_message}},
        )
    assert modern.headers["content-type"].startswith("application/a2a+json")
    assert "url" not in modern.json()
    assert modern.headers["vary"] == legacy.headers["vary"] == "A2A-Version"
    assert legacy.json()["url"] == url
    assert [i["protocolVersion"] for i in legacy.json()["supportedInterfaces"]] == ["1.0", "0.3"]
    assert v1.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Without `A2A-Version: 1.0` a request is 0.3 (the spec's default), which has no `SendMessage`:
    # the 1.0 error for a version not served, naming both.
    error = v1_name_as_0_3.json()["error"]
    assert error["code"] == -32009
    assert "A2A version '0.3' is not supported by this handler. Expected version '1.0'." in error["message"]
    assert v03_send.json()["result"]["status"]["state"] == "completed"


async def test_a_1_0_client_lists_only_its_own_tasks(fake_openai: FakeOpenAI, issuer: Issuer) -> None:  # noqa: F811
    fake_openai.default = lambda request: Text("noted")
    alice, bob = f"Bearer {issuer.token(sub='alice')}", f"Bearer {issuer.token(sub='bob')}"
    async with serve_agent(oidc_config(fake_openai.base_url, issuer)) as agent:
        async with a2a_client(agent.base_url, bearer=alice) as as_alice:
            mine = {(await final_task(as_alice, text_request(f"note {n}"))).id for n in range(2)}
            listed = await as_alice.list_tasks(ListTasksRequest())
        async with a2a_client(agent.base_url, bearer=bob) as as_bob:
            theirs = await as_bob.list_tasks(ListTasksRequest())
    assert {task.id for task in listed.tasks} == mine
    assert list(theirs.tasks) == []


async def test_a_1_0_request_over_the_body_limit_is_refused_before_the_model(fake_openai: FakeOpenAI) -> None:
    wire = Wire()
    async with (
        serve_agent(config(fake_openai)) as agent,
        httpx.AsyncClient(timeout=30, event_hooks={"request": [wire.record]}) as http,
    ):
        client = await create_client(agent.base_url, ClientConfig(streaming=False, httpx_client=http))
        with pytest.raises(A2AClientError, match="HTTP Error 413"):
            await final_task(client, text_request("x" * (5 * 1024 * 1024)))
        await client.close()
    assert wire.calls == [("SendMessage", "1.0")]  # the 1.0 client, on the wire as 1.0
    assert fake_openai.completions == []
