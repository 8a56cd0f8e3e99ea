"""The a2a-sdk's own client against an agent: the card, blocking and streaming sends, tasks.

async with a2a_client(agent.base_url, streaming=True, bearer="Bearer t") as client:
    events = [e async for e in client.send_message(text_request("hi"))]
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, StreamResponse, Task


@contextlib.asynccontextmanager
async def a2a_client(
    base_url: str, *, streaming: bool = False, bearer: str | None = None
) -> AsyncIterator[Client]:
    """A client made from the agent's card at `base_url` (the SDK resolves the well-known path)."""
    headers = {"Authorization": bearer} if bearer else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        client = await create_client(base_url, ClientConfig(streaming=streaming, httpx_client=http))
        try:
            yield client
        finally:
            await client.close()


def text_request(
    text: str, *, context_id: str | None = None, metadata: dict[str, object] | None = None
) -> SendMessageRequest:
    """A SendMessage request with one text part (in `context_id` when given)."""
    message = new_text_message(text, context_id=context_id, role=Role.ROLE_USER)
    request = SendMessageRequest(message=message)
    if metadata:
        request.metadata.update(metadata)
    return request


async def final_task(client: Client, request: SendMessageRequest) -> Task:
    """The task a blocking send answers with."""
    events = [event async for event in client.send_message(request)]
    assert len(events) == 1, events
    assert events[0].HasField("task"), events
    return events[0].task


async def stream_events(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Every event of a streaming send, in order."""
    return [event async for event in client.send_message(request)]
