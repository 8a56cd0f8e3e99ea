"""Amazon Bedrock's Converse API, for every Bedrock model family (`type: bedrock`).

`POST /model/{modelId}/converse` answers JSON; `POST /model/{modelId}/converse-stream` answers
`application/vnd.amazon.eventstream` frames (`llm/event_stream.py`), one per stream event, and
an `exception` frame for a failure mid-stream. Bodies and answers are built and read in
`llm/converse_wire.py`; the provider is the shared `SdkProvider`, on `ConverseClient`, which
does for Converse what the SDKs' clients do for the others (`post`, retries, errors).

Credentials: a Bedrock API key when the provider names one (`apiKey`, sent as a bearer token),
else the standard AWS chain as botocore resolves it (environment keys, a web-identity token file
with `AWS_ROLE_ARN` as IRSA mounts it, EKS Pod Identity's container endpoint, a shared config
file, the instance role), each request signed with SigV4 by botocore's `SigV4Auth`
(`llm/aws_signing.py`). The request itself goes over httpx2 on the agent's transport. The
endpoint is `baseURL`, else AWS's standard override (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, then
`AWS_ENDPOINT_URL`), else the region's.

The health check is a Converse call of one output token on the model: it goes through the
credentials, the region and the model, so an expired token or a wrong region shows in
`get_health` rather than only as failed turns.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar
from urllib.parse import quote

import httpx2
from pydantic_core import from_json, to_json

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_api.fields import RequestParams
from pallas_io.llm_check import error_detail
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.adapter import SdkProvider
from pallas_runtime.llm.anthropic_bedrock import bedrock_base_url
from pallas_runtime.llm.aws_signing import AwsCredentialsError, AwsSigner
from pallas_runtime.llm.converse_wire import (
    ConverseStreamReader,
    converse_completion,
    converse_plan,
    converse_request,
)
from pallas_runtime.llm.errors import SdkErrors
from pallas_runtime.llm.event_stream import EventStreamError, Frame, FrameReader
from pallas_runtime.llm.params import ParamPlan
from pallas_runtime.llm.provider import LLMError, ProviderCheck
from pallas_runtime.llm.retries import RETRIED, retry_pause
from pallas_runtime.messages import Message, ToolSpec


class ConverseError(Exception):
    """Every failure of a Converse request."""


class ConverseTimeout(ConverseError):
    """No answer within the provider's timeout."""


class ConverseConnectionError(ConverseError):
    """Bedrock could not be reached (the cause is the transport's error), or no credentials."""


class ConverseStatusError(ConverseError):
    """Bedrock refused the request: `status_code`, and `api_message` (the kind and its words)."""

    def __init__(self, status_code: int, api_message: str) -> None:
        super().__init__(api_message)
        self.status_code = status_code
        self.api_message = api_message


CONVERSE_ERRORS = SdkErrors(ConverseError, ConverseTimeout, ConverseConnectionError, ConverseStatusError)


def endpoint_override(environ: Mapping[str, str]) -> str | None:
    """AWS's standard endpoint override for bedrock-runtime, the service's own before the global."""
    return environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME") or environ.get("AWS_ENDPOINT_URL") or None


def _refusal(status: int, headers: Mapping[str, str], content: bytes) -> ConverseStatusError:
    """Bedrock's error answer: `x-amzn-ErrorType` names the kind, the body says why."""
    try:
        body = from_json(content) if content else None
    except ValueError:
        body = content.decode(errors="replace")[:200]
    kind = (headers.get("x-amzn-errortype") or "").split(":", 1)[0]
    detail = error_detail(body, f"Error code: {status}")
    return ConverseStatusError(status, f"{kind}: {detail}" if kind else detail)


def _event(frame: Frame) -> dict[str, Any]:
    """One stream frame as `{kind: payload}`; a failure frame raises it."""
    payload = from_json(frame.payload) if frame.payload else {}
    if frame.headers.get(":message-type", "event") != "event":
        kind = frame.headers.get(":exception-type") or frame.headers.get(":error-code") or "error"
        message = payload.get("message") or payload.get("Message") if isinstance(payload, dict) else None
        raise ConverseError(f"{kind}: {message or 'the stream failed'}")
    return {frame.headers.get(":event-type", ""): payload}


class ConverseClient:
    """Converse requests for one model id at a time, signed (or with a bearer key), retried.

    It takes what the shared adapter sends an SDK client: `post(path, body=…)` with the model in
    the body; the model moves into the path, and a `tool_choice` the parameter plan set moves
    into `toolConfig` (Converse takes a choice only among tools).
    """

    def __init__(self, *, base_url: str, region: str, key: str | None, timeout: float, retries: int) -> None:
        self._base_url = base_url
        self._region = region
        self._key = key
        self._timeout = timeout
        self._retries = retries
        self._signer = AwsSigner(region) if key is None else None
        self._http = httpx2.AsyncClient(
            transport=AiohttpTransport(trace_headers=True), timeout=httpx2.Timeout(timeout)
        )

    def with_options(self, *, max_retries: int, timeout: float | None = None) -> ConverseClient:
        """This client with another retry count (and timeout), on the same connections and credentials."""
        twin = ConverseClient.__new__(ConverseClient)
        twin.__dict__.update(self.__dict__)
        twin._retries = max_retries
        if timeout is not None:
            twin._timeout = timeout
        return twin

    async def post(
        self, path: str, *, cast_to: Any, body: dict[str, Any], stream: bool = False, stream_cls: Any = None
    ) -> Any:
        """The answer (an `httpx2.Response`), or with `stream` its events in batches.

        A batch is the events of one network read, each `{kind: payload}`.

        Raises:
            ConverseError: the request failed after retries, or the stream broke.
        """
        request = dict(body)
        model = str(request.pop("model"))
        if (choice := request.pop("tool_choice", None)) is not None and "toolConfig" in request:
            request["toolConfig"] = {**request["toolConfig"], "toolChoice": choice}
        # `:` stays as it is: the transport sends it unescaped (RFC 3986 allows it in a path),
        # and the signature must cover the path as sent.
        url = f"{self._base_url}/model/{quote(model, safe=':')}/{'converse-stream' if stream else path}"
        payload = to_json(request)
        if stream:
            return self._events(url, payload)
        return await self._send(url, payload)

    async def _send(self, url: str, payload: bytes) -> httpx2.Response:
        for attempt in range(self._retries + 1):
            headers = await self._headers(url, payload, "application/json")
            try:
                response = await self._http.post(url, content=payload, headers=headers, timeout=self._timeout)
            except httpx2.HTTPError as exc:
                failure = self._unreachable(exc)
            else:
                if response.is_success:
                    return response
                failure = _refusal(response.status_code, response.headers, response.content)
                if response.status_code not in RETRIED:
                    raise failure
            if attempt == self._retries:
                raise failure
            await asyncio.sleep(retry_pause(attempt))
        raise AssertionError("unreachable")

    async def _events(self, url: str, payload: bytes) -> AsyncIterator[list[object]]:
        """The stream's events, in batches.

        Only a refused request is retried: once text went out, a retry would repeat it.
        """
        frames = FrameReader()
        for attempt in range(self._retries + 1):
            headers = await self._headers(url, payload, "application/vnd.amazon.eventstream")
            try:
                async with self._http.stream(
                    "POST", url, content=payload, headers=headers, timeout=self._timeout
                ) as response:
                    if not response.is_success:
                        failure = _refusal(response.status_code, response.headers, await response.aread())
                        if response.status_code in RETRIED and attempt < self._retries:
                            await asyncio.sleep(retry_pause(attempt))
                            continue
                        raise failure
                    async for chunk in response.aiter_bytes():
                        batch: list[object] = []
                        for frame in frames.feed(chunk):
                            try:
                                batch.append(_event(frame))
                            except ConverseError:
                                yield batch  # what came before the failure is the caller's all the same
                                raise
                        yield batch
            except httpx2.HTTPError as exc:
                raise self._unreachable(exc) from exc
            except EventStreamError as exc:
                raise ValueError(str(exc)) from None
            return

    def _unreachable(self, exc: httpx2.HTTPError) -> ConverseError:
        if isinstance(exc, httpx2.TimeoutException):
            return ConverseTimeout(str(exc))
        failure = ConverseConnectionError(str(exc))
        failure.__cause__ = exc
        return failure

    async def _headers(self, url: str, payload: bytes, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._signer is None:  # a Bedrock API key
            return {**headers, "Authorization": f"Bearer {self._key}"}
        try:
            return await self._signer.sign("POST", url, headers, payload)
        except AwsCredentialsError as exc:
            raise ConverseConnectionError(str(exc)) from None

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()


class BedrockConverseProvider(SdkProvider):
    """One Bedrock model of any family, through the Converse API."""

    kind = "bedrock"
    completion_path = "converse"
    sdk_errors = CONVERSE_ERRORS
    sdk_client: ClassVar[type[Any]] = ConverseClient
    # No SDK: `_make_client` builds the ConverseClient, whose streams are its own.
    sdk_http_client: ClassVar[type[Any]] = httpx2.AsyncClient
    sdk_stream: ClassVar[type[Any]] = object
    # The stream is another path (`converse-stream`), not a field.
    stream_fields = MappingProxyType({})
    parse_body = staticmethod(converse_completion)
    stream_reader = staticmethod(ConverseStreamReader)

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._region = config.provider.region or ""
        super().__init__(config, api_key=api_key)
        if self._client is None and self._key_problem is None:
            # No key named: the AWS credential chain signs each request.
            self._client = self._make_client(None, config.provider)

    def _default_base_url(self) -> str:
        return endpoint_override(os.environ) or bedrock_base_url(self._region)

    def _make_client(self, api_key: str | None, provider: ProviderConfig) -> Any:
        return ConverseClient(
            base_url=self._base_url,
            region=self._region,
            key=api_key,
            timeout=provider.timeout_seconds,
            retries=provider.max_retries,
        )

    def _plan_for(self, params: RequestParams) -> ParamPlan:
        return converse_plan(params, self._capabilities)

    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        try:
            return converse_request(system, messages, tools)
        except ValueError as exc:
            raise LLMError(f"{self._label}: {exc}") from None

    def _warning_subject(self) -> str:
        return f"{self._label} (Bedrock Converse, model {self._model!r})"

    async def preflight(self) -> ProviderCheck:
        """A Converse call of one output token on the model; never raises."""
        where = f"Amazon Bedrock ({self._base_url}, region {self._region})"
        probe = {
            "messages": [{"role": "user", "content": [{"text": "ping"}]}],
            "inferenceConfig": {"maxTokens": 1},
        }
        return await self._probe(self.completion_path, probe, where)
