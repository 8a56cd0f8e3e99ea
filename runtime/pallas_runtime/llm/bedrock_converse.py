"""Amazon Bedrock's Converse API, for every Bedrock model family (`type: bedrock`).

`POST /model/{modelId}/converse` answers JSON; `POST /model/{modelId}/converse-stream` answers
`application/vnd.amazon.eventstream` frames (`llm/event_stream.py`), one per stream event, and
an `exception` frame for a failure mid-stream. Bodies and answers are built and read in
`llm/converse_wire.py`.

Credentials: a Bedrock API key when the provider names one (`apiKey`, sent as a bearer token),
else the standard AWS chain as botocore resolves it (environment keys, a web-identity token file
with `AWS_ROLE_ARN` as IRSA mounts it, EKS Pod Identity's container endpoint, a shared config
file, the instance role), each request signed with SigV4 by botocore's `SigV4Auth`. The chain's
credentials refresh themselves before they expire; resolving them may call STS, which botocore
does synchronously, so it runs in a worker thread. The request itself goes over httpx2 on the
agent's transport. The endpoint is `baseURL`, else AWS's standard override
(`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, then `AWS_ENDPOINT_URL`), else the region's.

The health check is a Converse call of one output token on the model: it goes through the
credentials, the region and the model, so an expired token or a wrong region shows in
`get_health` rather than only as failed turns.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx2
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials
from botocore.exceptions import BotoCoreError, ClientError
from botocore.session import Session
from pydantic_core import from_json, to_json

from pallas_api.config import AgentConfig, ModelOption
from pallas_api.fields import RequestParams
from pallas_io.llm_check import CHECK_TIMEOUT, error_detail, provider_label
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.anthropic_bedrock import bedrock_base_url
from pallas_runtime.llm.converse_wire import (
    ConverseStreamReader,
    converse_completion,
    converse_plan,
    converse_request,
)
from pallas_runtime.llm.errors import safe
from pallas_runtime.llm.event_stream import EventStreamError, Frame, FrameReader
from pallas_runtime.llm.params import check_call_params, dropped_warning
from pallas_runtime.llm.provider import LLMError, ProviderCheck
from pallas_runtime.messages import Completion, Message, TextSink, ToolSpec

log = logging.getLogger("pallas.llm")

SIGNING_NAME = "bedrock"
"""The service name Bedrock's runtime signs requests under (its endpoint is `bedrock-runtime`)."""
RETRIED = frozenset({408, 429, 500, 502, 503, 504})


def endpoint_override(environ: Mapping[str, str]) -> str | None:
    """AWS's standard endpoint override for bedrock-runtime, the service's own before the global."""
    return environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME") or environ.get("AWS_ENDPOINT_URL") or None


class _Failure(Exception):
    """A request Bedrock refused or could not serve: the status (None: no answer) and why."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class BedrockConverseProvider:
    """One Bedrock model of any family, through the Converse API.

    Args:
        config: The agent's configuration; `provider.region` is required.
        api_key: A Bedrock API key (sent as a bearer) when the provider names one; None to sign
            with the AWS credential chain's credentials.
        environ: Where the endpoint override is read (the process environment by default).
    """

    def __init__(
        self, config: AgentConfig, *, api_key: str | None, environ: Mapping[str, str] | None = None
    ) -> None:
        provider = config.provider
        env = os.environ if environ is None else environ
        self._name = provider.name
        self._model = config.model
        self._capabilities = config.capabilities
        self._region = provider.region or ""
        self._label = provider_label(provider.type, provider.name)
        base = provider.base_url or endpoint_override(env) or bedrock_base_url(self._region)
        self._base_url = base.rstrip("/")
        self._timeout = provider.timeout_seconds
        self._retries = provider.max_retries
        self._streaming = provider.streaming
        self._defaults = config.request_params
        self._plan = converse_plan(config.request_params, self._capabilities)
        self._warned = False
        self._key = api_key if provider.api_key_env is not None else None
        self._key_problem = (
            f"{self._label}: no API key: {provider.api_key_origin()} is not set"
            if provider.api_key_env is not None and not api_key
            else None
        )
        # The chain is resolved once and its credentials refresh themselves (web identity, pod
        # identity and instance roles expire): a botocore session per provider, not per call.
        self._session = Session() if self._key is None else None
        self._client = httpx2.AsyncClient(
            transport=AiohttpTransport(trace_headers=True), timeout=httpx2.Timeout(self._timeout)
        )
        self._owns_client = True

    @property
    def name(self) -> str:
        """The provider's name in the deployment."""
        return self._name

    @property
    def model(self) -> str:
        """The Bedrock model id (or inference profile) called."""
        return self._model

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        params: RequestParams | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        """One model turn; see `LLMProvider.complete`.

        Raises:
            LLMError: No credentials, a refusal, a failure after retries, or an unusable answer.
        """
        if self._key_problem is not None:
            raise LLMError(self._key_problem)
        self._warn_dropped_once()
        plan = (
            self._plan
            if params is None or params is self._defaults
            else converse_plan(params, self._capabilities)
        )
        try:
            body = converse_request(plan, system, messages, tools)
        except ValueError as exc:
            raise LLMError(f"{self._label}: {exc}") from None
        streamed = on_text is not None and self._streaming
        try:
            if on_text is not None and streamed:
                answer = await self._stream(body, on_text)
            else:
                answer = from_json(await self._send("converse", body, self._retries))
            if not isinstance(answer, Mapping):
                raise ValueError("the response is not a JSON object")
            return converse_completion(answer)
        except _Failure as exc:
            raise LLMError(self._safe(f"{self._label}: {exc}"), status=exc.status) from None
        except ValueError as exc:
            what = "streamed response" if streamed else "response"
            raise LLMError(self._safe(f"{self._label}: unusable {what}: {exc}")) from None

    async def _headers(self, url: str, payload: bytes, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._key is not None:
            return {**headers, "Authorization": f"Bearer {self._key}"}
        credentials = await self._credentials()
        request = AWSRequest(method="POST", url=url, data=payload, headers=headers)
        SigV4Auth(credentials, SIGNING_NAME, self._region).add_auth(request)
        return dict(request.headers.items())

    async def _credentials(self) -> ReadOnlyCredentials:
        assert self._session is not None
        session = self._session

        def resolve() -> ReadOnlyCredentials | None:
            # Frozen: one consistent key, secret and token, refreshed first when near expiry.
            found = session.get_credentials()
            return found.get_frozen_credentials() if found is not None else None

        try:
            credentials = await asyncio.to_thread(resolve)
        except (BotoCoreError, ClientError) as exc:
            raise _Failure(f"AWS credentials could not be resolved: {exc}", None) from None
        if credentials is None:
            raise _Failure(
                "no AWS credentials: none of the standard chain's sources (AWS_ACCESS_KEY_ID, a "
                "web-identity token file with AWS_ROLE_ARN, EKS Pod Identity, an instance role) "
                "gave any, and no apiKey is set",
                None,
            )
        return credentials

    def _url(self, action: str) -> str:
        # The model id (`anthropic.claude-…:0`, an inference profile ARN) is one path segment.
        # `:` stays as it is: the transport sends it unescaped (RFC 3986 allows it in a path),
        # and the signature must cover the path as sent.
        return f"{self._base_url}/model/{quote(self._model, safe=':')}/{action}"

    async def _send(self, action: str, body: dict[str, Any], retries: int) -> bytes:
        """POST `body` to the model's `action`; the answer's bytes, after retries on 429 and 5xx."""
        payload = to_json(body)
        url = self._url(action)
        for attempt in range(retries + 1):
            try:
                headers = await self._headers(url, payload, "application/json")
                response = await self._client.post(url, content=payload, headers=headers)
            except httpx2.TimeoutException:
                failure = _Failure(f"request to {self._base_url} timed out after {self._timeout:g}s", None)
            except httpx2.HTTPError as exc:
                failure = _Failure(f"cannot reach {self._base_url}: {type(exc).__name__}: {exc}", None)
            else:
                if response.is_success:
                    return response.content
                failure = self._refusal(response.status_code, response.headers, response.content)
                if response.status_code not in RETRIED:
                    raise failure
            if attempt == retries:
                raise failure
            await asyncio.sleep(min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def _stream(self, body: dict[str, Any], on_text: TextSink) -> dict[str, Any]:
        """Stream the answer, text to `on_text` as it comes; the body the events add up to.

        Only a refused request is retried: once text went out, a retry would repeat it.
        """
        payload = to_json(body)
        url = self._url("converse-stream")
        reader = ConverseStreamReader()
        frames = FrameReader()
        for attempt in range(self._retries + 1):
            headers = await self._headers(url, payload, "application/vnd.amazon.eventstream")
            try:
                async with self._client.stream("POST", url, content=payload, headers=headers) as response:
                    if not response.is_success:
                        failure = self._refusal(
                            response.status_code, response.headers, await response.aread()
                        )
                        if response.status_code in RETRIED and attempt < self._retries:
                            await asyncio.sleep(min(0.5 * 2**attempt, 8.0))
                            continue
                        raise failure
                    async for chunk in response.aiter_bytes():
                        text = "".join([self._event(frame, reader) for frame in frames.feed(chunk)])
                        if text:
                            await on_text(text)
            except httpx2.TimeoutException:
                raise _Failure(
                    f"request to {self._base_url} timed out after {self._timeout:g}s", None
                ) from None
            except httpx2.HTTPError as exc:
                raise _Failure(f"cannot reach {self._base_url}: {type(exc).__name__}: {exc}", None) from None
            except EventStreamError as exc:
                raise ValueError(str(exc)) from None
            return reader.body()
        raise AssertionError("unreachable")

    @staticmethod
    def _event(frame: Frame, reader: ConverseStreamReader) -> str:
        """The text one stream frame adds; a failure frame raises it."""
        event = from_json(frame.payload) if frame.payload else {}
        if frame.headers.get(":message-type", "event") != "event":
            kind = frame.headers.get(":exception-type") or frame.headers.get(":error-code") or "error"
            message = event.get("message") or event.get("Message") if isinstance(event, dict) else None
            raise _Failure(f"{kind}: {message or 'the stream failed'}", None)
        if not isinstance(event, dict):
            return ""
        return reader.feed(frame.headers.get(":event-type", ""), event)

    @staticmethod
    def _refusal(status: int, headers: Mapping[str, str], content: bytes) -> _Failure:
        """Bedrock's error answer: `x-amzn-ErrorType` names the kind, the body says why."""
        try:
            body = from_json(content) if content else None
        except ValueError:
            body = content.decode(errors="replace")[:200]
        kind = (headers.get("x-amzn-errortype") or "").split(":", 1)[0]
        detail = error_detail(body, f"Error code: {status}")
        return _Failure(f"HTTP {status}: {kind + ': ' if kind else ''}{detail}", status)

    def check_params(self, params: RequestParams) -> None:
        """Refuse a call's own parameters that Converse has no field for (ParamsNotTaken)."""
        check_call_params(converse_plan(params, self._capabilities), self._subject())

    async def preflight(self) -> ProviderCheck:
        """A Converse call of one output token on the model; never raises."""
        where = f"Amazon Bedrock ({self._base_url}, region {self._region})"
        if self._key_problem is not None:
            return ProviderCheck(False, self._key_problem, time.monotonic())
        probe = {
            "messages": [{"role": "user", "content": [{"text": "ping"}]}],
            "inferenceConfig": {"maxTokens": 1},
        }
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                await self._send("converse", probe, retries=0)
        except _Failure as exc:
            message = self._safe(f"{self._label}: {exc} ({where}, model {self._model!r})")
            return ProviderCheck(False, message, time.monotonic())
        except TimeoutError:
            message = f"{self._label}: {where} did not answer within {CHECK_TIMEOUT:g}s"
            return ProviderCheck(False, message, time.monotonic())
        return ProviderCheck(True, f"{self._label}: {where}: model {self._model!r} answers", time.monotonic())

    def with_model(self, option: ModelOption) -> BedrockConverseProvider:
        """This provider calling another of its models, on the same connections and credentials."""
        twin = copy.copy(self)
        twin._model = option.model
        twin._capabilities = option.capabilities
        twin._plan = converse_plan(self._defaults, option.capabilities)
        twin._owns_client = False
        return twin

    def with_key(self, key: str) -> BedrockConverseProvider:
        """This provider sending `key` (a caller's Bedrock API key) on a client of its own."""
        twin = copy.copy(self)
        twin._key, twin._key_problem, twin._session = key, None, None
        twin._client = httpx2.AsyncClient(
            transport=AiohttpTransport(trace_headers=True), timeout=httpx2.Timeout(self._timeout)
        )
        twin._owns_client = True
        return twin

    async def aclose(self) -> None:
        """Close the connections (not those of the provider this one was made from)."""
        if self._owns_client:
            await self._client.aclose()

    def _subject(self) -> str:
        return f"{self._label} (Bedrock Converse, model {self._model!r})"

    def _warn_dropped_once(self) -> None:
        if self._warned:
            return
        self._warned = True
        if warning := dropped_warning(self._plan, self._subject()):
            log.warning(warning)

    def _safe(self, text: str) -> str:
        return safe(text, self._key)
