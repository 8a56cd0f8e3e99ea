"""Reading a completion stream's events with less work than the SDKs' generic SSE decoders.

The SDKs still send the request (their retries, timeouts, headers, error statuses) and hand the
open response to the stream class they are given; these subclasses of their stream classes read
it: each `data:` line is one JSON event, `data: [DONE]` ends an OpenAI stream, an `event: error`
(Anthropic) or an `{"error": …}` event (OpenAI) raises the SDK's status error.

What a stream costs is per event (a model sends one per token), so the reading is lean: the
body's bytes are split into lines here (not through httpx's text and line decoders), the JSON is
decoded by pydantic-core (a third of `json.loads`'s time), and the events of one network read go
out as one batch, so the generators between the socket and the adapter step once per read, not
once per event (`bench/streaming_bench.py`; docs/runtime.md, Performance).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import anthropic
import openai
from pydantic_core import from_json

Event = tuple[str, Any]
"""(event name, decoded data) of one event; the name is '' where the stream names none."""


async def _batches(response: Any) -> AsyncIterator[list[Event]]:
    """The events with data of each network read, in order; a stream's end closes the response.

    Raises:
        ValueError: An event's data is not JSON.
    """
    name = ""
    rest = b""
    try:
        async for chunk in response.aiter_bytes():
            lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
            rest = lines.pop()  # the unfinished line (b"" when the read ended on a line break)
            batch: list[Event] = []
            for line in lines:
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        if batch:
                            yield batch
                        return
                    batch.append((name, from_json(data)))
                elif line.startswith(b"event:"):
                    name = line[6:].strip().decode()
                elif not line.strip():
                    name = ""
            if batch:
                yield batch
    finally:
        await response.aclose()


def _openai_error(name: str, data: object) -> object | None:
    """The error an OpenAI stream event carries, else None.

    Chat Completions puts `{"error": {…}}` in a data line; the Responses API sends an `error`
    event (`{"type": "error", "message", "code"}`) or a `response.failed` one whose response
    holds the error.
    """
    if not isinstance(data, dict):
        return None
    if data.get("error"):
        return cast(object, data["error"])
    kind = data.get("type")
    if name == "error" or kind == "error":
        return data
    if kind == "response.failed":
        response = data.get("response")
        return (response.get("error") if isinstance(response, dict) else None) or {
            "message": "response failed"
        }
    return None


class OpenAIEvents(openai.AsyncStream[list[object]]):
    """Chat Completions chunks or Responses API events as dicts, in batches (one per network read)."""

    async def __stream__(self) -> AsyncIterator[list[object]]:
        async for batch in _batches(self.response):
            events: list[object] = []
            for name, data in batch:
                # Chat chunks are unnamed and carry no "error" key: one look each on a token stream.
                if (name or "error" in data) and (error := _openai_error(name, data)) is not None:
                    if events:  # what came before the error is the caller's all the same
                        yield events
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(
                        str(message or "an error occurred during streaming"),
                        self.response.request,
                        body=error,
                    )
                events.append(data)
            yield events


class AnthropicEvents(anthropic.AsyncStream[list[object]]):
    """Messages stream events as dicts (their `type` says which), in batches (one per network read)."""

    async def __stream__(self) -> AsyncIterator[list[object]]:
        async for batch in _batches(self.response):
            events: list[object] = []
            for name, data in batch:
                if name == "ping":
                    continue
                if name == "error":
                    if events:  # what came before the error is the caller's all the same
                        yield events
                    raise self._client._make_status_error(str(data), body=data, response=self.response)
                events.append(data)
            yield events
