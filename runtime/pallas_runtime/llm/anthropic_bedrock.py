"""Anthropic's Messages API on Amazon Bedrock (`type: anthropic`, `platform: bedrock`).

The anthropic SDK's `AsyncAnthropicBedrock` sends the requests: it moves the model into the
path (`POST /model/{model}/invoke`, `…/invoke-with-response-stream` for a stream), adds
Bedrock's `anthropic_version`, and sends the key, a Bedrock API key, as a bearer token (with
AWS access keys it would sign with SigV4 through boto3, which the agent does not ship; signed
requests are `type: bedrock`'s, the Converse API in `llm/bedrock_converse.py`). Bodies
and answers are the Messages API's, so the Anthropic adapter's translation, parameter plan and
stream reader are used as they are. What differs is the stream's framing: Bedrock sends AWS
event-stream frames (`llm/event_stream.py`) whose `chunk` events carry each Messages stream
event base64-encoded, and an `exception` frame for a failure mid-stream.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
from pydantic_core import from_json

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.anthropic_messages import AnthropicMessagesProvider
from pallas_runtime.llm.event_stream import Frame, FrameReader
from pallas_runtime.llm.provider import ProviderCheck


def bedrock_base_url(region: str) -> str:
    """Bedrock's runtime endpoint in `region` (the SDK's default)."""
    return f"https://bedrock-runtime.{region}.amazonaws.com"


def _event(frame: Frame) -> dict[str, Any] | None:
    """The Messages stream event a `chunk` frame carries; None for other events and pings."""
    if frame.headers.get(":event-type") != "chunk":
        return None
    chunk = from_json(frame.payload)
    event = from_json(base64.b64decode(chunk["bytes"])) if isinstance(chunk, dict) else None
    if not isinstance(event, dict) or event.get("type") == "ping":
        return None
    return event


class BedrockEvents(anthropic.AsyncStream[list[object]]):
    """A Bedrock response stream's Messages events as dicts, in batches (one per network read)."""

    def __init__(
        self, *, cast_to: type[Any], response: httpx2.Response, client: Any, options: Any = None
    ) -> None:
        # Not the base initializer: it builds the SDK's own decoder, which needs botocore.
        self.response = response
        self._cast_to = cast_to
        self._client = client
        self._options = options

    async def __stream__(self) -> AsyncIterator[list[object]]:
        reader = FrameReader()
        try:
            async for chunk in self.response.aiter_bytes():
                events: list[object] = []
                for frame in reader.feed(chunk):
                    if frame.headers.get(":message-type", "event") != "event":
                        if events:  # what came before the failure is the caller's all the same
                            yield events
                        raise self._failure(frame)
                    if (event := _event(frame)) is not None:
                        events.append(event)
                if events:
                    yield events
        finally:
            await self.response.aclose()

    def _failure(self, frame: Frame) -> Exception:
        kind = frame.headers.get(":exception-type") or frame.headers.get(":error-code") or "error"
        body = from_json(frame.payload) if frame.payload else {}
        message = body.get("message") or body.get("Message") if isinstance(body, dict) else None
        error = {"type": kind, "message": f"{kind}: {message or 'the stream failed'}"}
        return self._client._make_status_error(
            error["message"], body={"error": error}, response=self.response
        )


class AnthropicBedrockProvider(AnthropicMessagesProvider):
    """One Claude model on Amazon Bedrock, with a Bedrock API key."""

    sdk_client = anthropic.AsyncAnthropicBedrock
    sdk_stream = BedrockEvents

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._region = config.provider.region or ""
        super().__init__(config, api_key=api_key)

    def _default_base_url(self) -> str:
        return bedrock_base_url(self._region)

    def _make_client(self, api_key: str, provider: ProviderConfig) -> Any:
        return anthropic.AsyncAnthropicBedrock(
            api_key=api_key,
            aws_region=self._region,
            base_url=self._base_url,
            timeout=provider.timeout_seconds,
            max_retries=provider.max_retries,
            http_client=anthropic.DefaultAsyncHttpxClient(transport=AiohttpTransport()),
        )

    async def preflight(self) -> ProviderCheck:
        """bedrock-runtime has no models endpoint: the key's presence is all that is checked."""
        if self._key_problem is not None:
            return ProviderCheck(False, self._key_problem, time.monotonic())
        where = self._base_url
        return ProviderCheck(
            True, f"{self._label}: Amazon Bedrock ({where}); key set, not probed", time.monotonic()
        )
