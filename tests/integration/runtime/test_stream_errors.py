"""A stream that breaks off with the provider's error event ends the call with LLM_ERROR's text.

The text that already went out stays out; the message names the provider and what it said.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from pallas_api.config import parse_config
from pallas_runtime.llm.factory import create_provider
from pallas_runtime.llm.provider import LLMError
from pallas_runtime.messages import TextPart, UserMessage
from tests.support.mcp_servers import serve_app

OPENAI_BROKEN = [
    'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,'
    '"delta":{"content":"Half"},"finish_reason":null}]}',
    'data: {"error":{"message":"the model server went away","type":"server_error"}}',
]
ANTHROPIC_BROKEN = [
    'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
    '"role":"assistant","model":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}',
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}',
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"Half"}}',
    'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
]


def broken_llm(events: list[str]) -> Starlette:
    async def complete(request: Request) -> StreamingResponse:
        assert (await request.json())["stream"] is True

        async def body() -> Any:
            for event in events:
                yield event + "\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    routes = [Route(path, complete, methods=["POST"]) for path in ("/v1/chat/completions", "/v1/messages")]
    return Starlette(routes=routes)


@pytest.mark.parametrize(
    ("kind", "events", "said"),
    [("openai", OPENAI_BROKEN, "the model server went away"), ("anthropic", ANTHROPIC_BROKEN, "Overloaded")],
)
async def test_an_error_event_mid_stream_is_an_llm_error_naming_what_the_provider_said(
    kind: str, events: list[str], said: str
) -> None:
    async with serve_app(broken_llm(events), path="") as server:
        base = server.url.rstrip("/") + ("/v1" if kind == "openai" else "")
        provider = create_provider(
            parse_config(
                {
                    "name": "a",
                    "model": "m",
                    "provider": {"name": "llm", "type": kind, "baseURL": base, "maxRetries": 0},
                }
            ),
            environ={},
        )
        pieces: list[str] = []

        async def sink(text: str) -> None:
            pieces.append(text)

        with pytest.raises(LLMError) as raised:
            await provider.complete(
                system="", messages=[UserMessage((TextPart("hi"),))], tools=[], on_text=sink
            )
        await provider.aclose()
    assert pieces == ["Half"]
    assert said in str(raised.value)
    assert json.dumps(str(raised.value))  # one printable message
