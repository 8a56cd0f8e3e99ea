"""The anthropic SDK's stream class, reading Messages stream events lean (`sse`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic

from pallas_runtime.llm.sse import event_batches


class AnthropicEvents(anthropic.AsyncStream[list[object]]):
    """Messages stream events as dicts (their `type` says which), in batches (one per network read)."""

    async def __stream__(self) -> AsyncIterator[list[object]]:
        async for batch in event_batches(self.response):
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
