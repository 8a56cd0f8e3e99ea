"""Anthropic's Messages API on Amazon Bedrock (`type: anthropic`, `platform: bedrock`).

The anthropic SDK's `AsyncAnthropicBedrock` sends the requests: it moves the model into the
path (`POST /model/{model}/invoke`, `…/invoke-with-response-stream` for a stream), adds
Bedrock's `anthropic_version`, and sends the key, a Bedrock API key, as a bearer token. With no
`apiKey` each request is signed with SigV4 with the pod's AWS credential chain instead
(`llm/aws_signing.py`, botocore's signer: the SDK's own signing goes through boto3, which the
agent does not ship). The health check is a Messages call of one output token on the model
(`/model/{model}/invoke`), as `type: bedrock`'s is a Converse call: bedrock-runtime has no models
endpoint, and Bedrock refuses token counting through the SDK. Bodies and answers are the
Messages API's, so the Anthropic adapter's translation, parameter plan and stream reader are used
as they are. What differs is the stream's framing: Bedrock sends AWS
event-stream frames (`llm/event_stream.py`) whose `chunk` events carry each Messages stream
event base64-encoded, and an `exception` frame for a failure mid-stream.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
from pydantic_core import from_json

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_runtime.llm.anthropic_messages import AnthropicMessagesProvider
from pallas_runtime.llm.aws_signing import AwsSigner
from pallas_runtime.llm.cloud_auth import Authorize, CloudAuthClient, client_options
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


class SignedBedrockClient(CloudAuthClient, anthropic.AsyncAnthropicBedrock):
    """The SDK's Bedrock client signing each request with SigV4 (the AWS chain's credentials)."""


def sigv4(signer: AwsSigner) -> Authorize:
    """Signs a request with `signer`.

    Only `content-type` and `accept` are signed besides what SigV4 adds (`host`, `x-amz-date`):
    the other headers are the SDK's and the transport's, which may be rewritten after signing.
    """

    async def authorize(request: httpx2.Request) -> None:
        kept = {name: request.headers[name] for name in ("content-type", "accept") if name in request.headers}
        request.headers.update(await signer.sign(request.method, str(request.url), kept, request.read()))

    return authorize


class AnthropicBedrockProvider(AnthropicMessagesProvider):
    """One Claude model on Amazon Bedrock, with a Bedrock API key or the AWS credential chain."""

    sdk_client = anthropic.AsyncAnthropicBedrock
    sdk_stream = BedrockEvents

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._region = config.provider.region or ""
        super().__init__(config, api_key=api_key)
        if self._client is None and self._key_problem is None:
            # No key named: the AWS credential chain signs each request.
            signed = sigv4(AwsSigner(self._region))
            self._client = SignedBedrockClient(authorize=signed, **self._client_options(config.provider))

    def _default_base_url(self) -> str:
        return bedrock_base_url(self._region)

    def _make_client(self, api_key: str, provider: ProviderConfig) -> Any:
        return anthropic.AsyncAnthropicBedrock(api_key=api_key, **self._client_options(provider))

    def _client_options(self, provider: ProviderConfig) -> dict[str, Any]:
        return client_options(provider, self._base_url, aws_region=self._region)

    async def preflight(self) -> ProviderCheck:
        """A Messages call of one output token on the model; never raises."""
        where = f"Amazon Bedrock ({self._base_url}, region {self._region})"
        probe = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        return await self._probe("/v1/messages", probe, where)
