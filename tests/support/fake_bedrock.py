"""A scripted fake of Amazon Bedrock's runtime serving Anthropic models, plain and streamed.

`POST /model/{model}/invoke` answers a Messages API body, as Bedrock does;
`POST /model/{model}/invoke-with-response-stream` answers `application/vnd.amazon.eventstream`:
one binary frame per Messages stream event (headers `:event-type: chunk`, `:content-type:
application/json`, `:message-type: event`; payload `{"bytes": <the event's JSON, base64>}`).
The request body is Bedrock's: no `model` (it is in the path), no `stream`, and an
`anthropic_version` field. A Bedrock API key arrives as a bearer token.
Errors are `{"message": …}` bodies with `x-amzn-ErrorType`, as Bedrock sends them; a
`BedrockException` step streams some text and then an `exception` frame.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pallas_runtime.llm.event_stream import encode_frame
from tests.support.fake_llm import FakeAnthropic, HttpError, RecordedRequest, Text, ToolCalls

_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                429: "ThrottlingException", 503: "ServiceUnavailableException"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BedrockException:
    """A stream that sends `text` and then fails with an `exception` frame of `kind`."""

    text: str
    kind: str = "modelStreamErrorException"
    message: str = "The model stream failed"


def chunk_frame(event: dict[str, Any]) -> bytes:
    """One Messages stream event as Bedrock frames it."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, payload)


class FakeBedrock(FakeAnthropic):
    """Bedrock's runtime API for Anthropic models (`anthropic.claude-…` ids)."""

    completion_path = "/model"

    def _routes(self) -> list[Route]:
        return [
            Route("/model/{model:path}/invoke", self._handle_completion, methods=["POST"]),
            Route(
                "/model/{model:path}/invoke-with-response-stream", self._handle_completion, methods=["POST"]
            ),
        ]

    @property
    def completions(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/model/")]

    def _render_reply(self, step: Text | ToolCalls, recorded: RecordedRequest) -> Response:
        model = recorded.path.removeprefix("/model/").rsplit("/", 1)[0]
        streamed = recorded.path.endswith("/invoke-with-response-stream")
        # The Anthropic fake renders the body; Bedrock's request had its model in the path.
        as_anthropic = dataclasses.replace(recorded, json={**(recorded.json or {}), "model": model})
        rendered = super()._render_reply(step, as_anthropic)
        assert isinstance(rendered, JSONResponse)
        body = json.loads(bytes(rendered.body))
        if not streamed:
            return JSONResponse(body, headers={"x-amzn-requestid": "fake-req"})
        self.streams.append([])
        return self._frames(self._events(body, step), step.interval, self.streams[-1])

    async def _respond(self, step: Any, recorded: RecordedRequest, render: Any) -> Response:
        if isinstance(step, BedrockException):
            return self._respond_exception(step, recorded)
        return await super()._respond(step, recorded, render)

    def _respond_exception(self, failure: BedrockException, recorded: RecordedRequest) -> Response:
        text = Text(failure.text)
        events = list(self._events_of(text, recorded))[:4]  # message_start, ping, block start, first delta
        exception = encode_frame(
            {
                ":exception-type": failure.kind,
                ":content-type": "application/json",
                ":message-type": "exception",
            },
            json.dumps({"message": failure.message}).encode(),
        )
        self.streams.append([])

        async def body() -> AsyncIterator[bytes]:
            for frame in [*(chunk_frame(e) for e in events), exception]:
                yield frame

        return StreamingResponse(body(), media_type="application/vnd.amazon.eventstream")

    def _events_of(self, step: Text, recorded: RecordedRequest) -> Iterator[dict[str, Any]]:
        model = recorded.path.removeprefix("/model/").rsplit("/", 1)[0]
        body = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": step.text}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
        for event in self._events(body, step):
            yield json.loads(event.split("data: ", 1)[1])

    @staticmethod
    def _frames(events: Iterator[str], interval: float, sent: list[float]) -> StreamingResponse:
        """The SSE events the Anthropic fake would send, framed for Bedrock, paced."""

        async def paced() -> AsyncIterator[bytes]:
            for event in events:
                if interval:
                    await asyncio.sleep(interval)
                sent.append(time.monotonic())
                yield chunk_frame(json.loads(event.split("data: ", 1)[1]))

        return StreamingResponse(paced(), media_type="application/vnd.amazon.eventstream")

    def _error(self, error: HttpError) -> Response:
        kind = error.type or _ERROR_TYPES.get(error.status, "InternalServerException")
        headers = {
            "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            **error.headers,
        }
        return JSONResponse({"message": error.message}, status_code=error.status, headers=headers)
