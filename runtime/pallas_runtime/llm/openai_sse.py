"""The OpenAI SDK's stream class, reading Chat Completions chunks or Responses API events lean (`sse`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import openai

from pallas_runtime.llm.sse import event_batches


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

    def __aiter__(self) -> AsyncIterator[list[object]]:
        # The batches themselves: the SDK's `__aiter__` is one more generator re-yielding each.
        return self._iterator

    async def __stream__(self) -> AsyncIterator[list[object]]:
        async for batch in event_batches(self.response):
            # Chat chunks are unnamed and carry no "error" key: one look each on a token stream.
            if not any(name or "error" in data for name, data in batch):
                yield [data for _, data in batch]
                continue
            events: list[object] = []
            for name, data in batch:
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
