"""Reading a completion stream's events with less work than the SDKs' generic SSE decoders.

The SDKs still send the request (their retries, timeouts, headers, error statuses) and hand the
open response to the stream class they are given; these subclasses of their stream classes read
it: each `data:` line is one JSON event, `data: [DONE]` ends an OpenAI stream, an `event: error`
(Anthropic) or an `{"error": …}` event (OpenAI) raises the SDK's status error. The SDKs' own
decoders build an object per line and per event; on a model's token-per-event stream that was
most of what streaming cost the agent (`bench/streaming_bench.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai


async def _events(response: Any) -> AsyncIterator[tuple[str, Any]]:
    """(event name, decoded data) of each event with data; a stream's end closes the response."""
    name = ""
    try:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                yield name, json.loads(data)
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif not line:
                name = ""
    finally:
        await response.aclose()


class OpenAIEvents(openai.AsyncStream[object]):
    """Chat Completions chunks as dicts."""

    async def __stream__(self) -> AsyncIterator[object]:
        async for _, data in _events(self.response):
            if isinstance(data, dict) and data.get("error"):
                error = data["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(
                    str(message or "an error occurred during streaming"), self.response.request, body=error
                )
            yield data


class AnthropicEvents(anthropic.AsyncStream[object]):
    """Messages stream events as dicts (their `type` says which)."""

    async def __stream__(self) -> AsyncIterator[object]:
        async for name, data in _events(self.response):
            if name == "ping":
                continue
            if name == "error":
                raise self._client._make_status_error(str(data), body=data, response=self.response)
            yield data
