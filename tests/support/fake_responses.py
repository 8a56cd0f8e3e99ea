"""A scripted fake of OpenAI's Responses API: `POST /v1/responses`, plain and streamed.

The shapes are the API's own (openai-python's `types/responses`): a `response` object whose
`output` holds `message` items (`output_text` parts) and `function_call` items (`call_id`,
`name`, `arguments` as a JSON string), usage as `input_tokens` (cached ones included, counted
again in `input_tokens_details.cached_tokens`) and `output_tokens` (reasoning included, in
`output_tokens_details.reasoning_tokens`). A stream is named events (`event: <type>` and a
`data:` object with the same `type` and a `sequence_number`): `response.created`, the items'
`output_item.added`/`done`, `output_text.delta`s, `function_call_arguments.delta`s, and
`response.completed` carrying the whole response. Errors are `{"error": {message, type, …}}`
bodies, as the Chat Completions fake's.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from starlette.responses import Response

from tests.support.fake_llm import (
    FakeOpenAI,
    FakeUsage,
    RecordedRequest,
    Text,
    ToolCalls,
    _halves,
    _model_of,
    _pieces,
)


class FakeOpenAIResponses(FakeOpenAI):
    """`POST /v1/responses` and `GET /v1/models`, as api.openai.com answers them."""

    completion_path = "/v1/responses"

    @staticmethod
    def _usage(usage: FakeUsage) -> dict[str, Any]:
        prompt = usage.input + usage.cache_read
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": usage.cache_read},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": prompt + usage.output,
        }

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        n = self._next_id()
        output: list[dict[str, Any]] = []
        if step.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_fake_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                }
            )
        if isinstance(step, ToolCalls):
            output.extend(
                {
                    "type": "function_call",
                    "id": f"fc_fake_{n}_{i}",
                    "call_id": call.id or f"call_fake_{n}_{i}",
                    "name": call.name,
                    "arguments": call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(call.arguments),
                    "status": "completed",
                }
                for i, call in enumerate(step.calls)
            )
        body: dict[str, Any] = {
            "id": f"resp_fake_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": _model_of(recorded),
            "output": output,
            "incomplete_details": None,
            "error": None,
        }
        if step.stop_reason == "length":
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        headers = {"x-request-id": f"req_fake_{n}"}
        return self._answer(recorded, step, body, headers, lambda: self._events(body, step))

    @staticmethod
    def _events(body: dict[str, Any], step: Text | ToolCalls) -> Iterator[str]:
        """The answer as Responses stream events, as the API streams it."""
        numbers = itertools.count()

        def event(kind: str, data: dict[str, Any]) -> str:
            payload = {"type": kind, "sequence_number": next(numbers), **data}
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

        started = body | {"status": "in_progress", "output": [], "usage": None}
        yield event("response.created", {"response": started})
        for index, item in enumerate(body["output"]):
            if item["type"] == "message":
                yield event(
                    "response.output_item.added", {"output_index": index, "item": item | {"content": []}}
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                yield event("response.content_part.added", where | {"part": part})
                for piece in _pieces(step):
                    yield event("response.output_text.delta", where | {"delta": piece, "logprobs": []})
                yield event("response.output_text.done", where | {"text": step.text, "logprobs": []})
                yield event("response.content_part.done", where | {"part": item["content"][0]})
            else:
                added = item | {"arguments": "", "status": "in_progress"}
                yield event("response.output_item.added", {"output_index": index, "item": added})
                for fragment in _halves(item["arguments"]):
                    yield event(
                        "response.function_call_arguments.delta",
                        {"item_id": item["id"], "output_index": index, "delta": fragment},
                    )
                yield event(
                    "response.function_call_arguments.done",
                    {"item_id": item["id"], "output_index": index, "arguments": item["arguments"]},
                )
            yield event("response.output_item.done", {"output_index": index, "item": item})
        final = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        yield event(final, {"response": body})


@pytest.fixture
async def fake_openai_responses() -> AsyncIterator[FakeOpenAIResponses]:
    """A started FakeOpenAIResponses serving the model `fake-model`."""
    async with FakeOpenAIResponses() as fake:
        yield fake
