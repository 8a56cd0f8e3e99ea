"""What both SDK-backed providers share: key handling, the request/response frame, preflight.

Each adapter supplies the wire specifics (client, request body, response parsing) through a few
hooks; retries, timeouts and errors stay the SDKs' own. The preflight is not the SDKs': it is the
product's one provider check (`pallas_io.llm_check`), which the registry runs too.
"""

from __future__ import annotations

import abc
import asyncio
import copy
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import httpx2

from pallas_api.config import AgentConfig, ModelOption, ProviderConfig
from pallas_api.fields import RequestParams
from pallas_io.llm_check import CHECK_TIMEOUT, ProviderEndpoint, check_provider, provider_label
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.errors import SdkErrors, describe, safe
from pallas_runtime.llm.params import ParamPlan, check_call_params, dropped_warning, ignored_warning
from pallas_runtime.llm.provider import LLMError, ProviderCheck
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    ContentPart,
    Message,
    TextSink,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

log = logging.getLogger("pallas.llm")


class StreamReader(Protocol):
    """Folds a completion stream's events, in order, into the body of a non-streamed answer."""

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; the text it adds to the answer ('' if none)."""

    def body(self) -> dict[str, Any]:
        """The response body the events add up to (what `parse_body` reads)."""


def wire_count(value: object) -> int:
    """A token count as the server sent it; 0 where it sent none (missing, null, not a number)."""
    return value if isinstance(value, int) else 0


def parse_arguments(raw: object) -> tuple[dict[str, Any], str | None]:
    """Read a tool call's `arguments` string.

    Args:
        raw: The `arguments` field as received: normally a JSON string; some servers send an
            object, or nothing for a call without arguments.

    Returns:
        The arguments, and None; or `{}` and why the arguments are unusable.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as exc:
            return {}, f"arguments are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


Blocks = list[dict[str, Any]]


def translated(
    messages: Sequence[Message],
    *,
    user: Callable[[UserMessage], Blocks],
    assistant: Callable[[AssistantMessage], Blocks],
    results: Callable[[ToolResultsMessage], Blocks],
) -> Blocks:
    """A conversation as a wire list: each message's items, in order, from its kind's builder.

    A `TurnFailure` is the conversation's record, not something anyone said: it is never sent.
    """
    wire: Blocks = []
    for message in messages:
        if isinstance(message, UserMessage):
            wire.extend(user(message))
        elif isinstance(message, AssistantMessage):
            wire.extend(assistant(message))
        elif isinstance(message, ToolResultsMessage):
            wire.extend(results(message))
    return wire


def alternating_turns(
    messages: Sequence[Message],
    *,
    user: Callable[[Sequence[ContentPart]], Blocks],
    assistant: Callable[[AssistantMessage], Blocks],
    results: Callable[[ToolResultsMessage], Blocks],
    assistant_role: str,
    parts: str,
) -> Blocks:
    """A conversation as the turns of an API that wants user and model turns to alternate.

    Each message becomes the blocks its builder makes (tool results a user turn); turns of the
    same role in a row are merged into one (a user message after tool results is the usual
    case, one after a turn kept as failed another); a message whose blocks are empty carries
    nothing and is left out, and so is a `TurnFailure`. `parts` names a turn's list of blocks.
    """
    turns = translated(
        messages,
        user=lambda m: [{"role": "user", parts: user(m.content)}],
        assistant=lambda m: [{"role": assistant_role, parts: assistant(m)}],
        results=lambda m: [{"role": "user", parts: results(m)}],
    )
    wire: Blocks = []
    for turn in turns:
        if not turn[parts]:
            continue
        if wire and wire[-1]["role"] == turn["role"]:
            wire[-1][parts].extend(turn[parts])
        else:
            wire.append(turn)
    return wire


def usage_counts(usage: object, *fields: str) -> Usage:
    """Token counts from a wire `usage` object whose fields map straight onto token kinds.

    `fields` name the input, output, cache-read and cache-write counts, in that order: for APIs
    that count cached prompt tokens apart from input tokens. Missing or null counts are 0.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    counts = [wire_count(usage.get(field)) for field in fields]
    return Usage(*counts)


class SdkProvider(abc.ABC):
    """An LLMProvider on an official SDK client.

    Args:
        config: The agent's configuration (provider, model, capabilities, request parameters).
        api_key: The key to send; None when the variable named by `provider.apiKeyEnv` is
            unset, in which case `preflight` reports it and `complete` raises LLMError.
    """

    kind: ClassVar[str]
    """`openai`, `anthropic` or `gemini`, as in `provider.type`."""
    completion_path: ClassVar[str]
    sdk_client: ClassVar[type[Any]]
    """The SDK's async client class."""
    sdk_http_client: ClassVar[type[Any]]
    """The SDK's httpx client class (its own defaults), given the agent's transport."""
    sdk_errors: ClassVar[SdkErrors]
    sdk_stream: ClassVar[type[Any]]
    stream_fields: ClassVar[Mapping[str, Any]] = MappingProxyType({"stream": True})
    """The wire fields that ask for a stream (`stream`, and what else the API wants)."""
    """The SDK's async SSE stream class, yielding the decoded events of each network read as a list:
    it ends at the stream's end and raises the SDK's errors for error events."""

    preflight_timeout: float = CHECK_TIMEOUT

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        provider = config.provider
        self._name = provider.name
        self._model = config.model
        self._capabilities = config.capabilities
        self._label = provider_label(self.kind, provider.name)
        self._timeout = provider.timeout_seconds
        self._attempts = provider.max_retries + 1
        self._configured_base_url = provider.base_url
        self._base_url = (provider.base_url or self._default_base_url()).rstrip("/")
        self._key = api_key
        self._defaults = config.request_params
        self._plan = self._plan_for(config.request_params)
        self._warned = False
        named = provider.api_key_env is not None
        # A provider naming no key variable is checked without a key, as the registry checks it;
        # only the SDK client gets the placeholder (it refuses to be built without one).
        self._endpoint = ProviderEndpoint(
            provider.name,
            provider.type,
            self._base_url,
            models=(config.model,),
            key_source=provider.api_key_origin() if named else None,
            key=api_key if named else None,
        )
        self._key_problem = self._endpoint.key_problem
        self._streaming = provider.streaming
        self._provider = provider
        self._client: Any = None
        self._owns_client = True
        if provider.credentials == "callerBearer":
            # No key of its own: each call brings one (`with_key`), and a call without one is
            # refused before it gets here; this is what a call that slipped through reads.
            self._key_problem = f"{self._label}: takes each caller's bearer token as its key; none came in"
        elif api_key:
            self._client = self._make_client(api_key, provider)

    # hooks

    @abc.abstractmethod
    def _default_base_url(self) -> str:
        """The vendor's public API, used when `baseURL` is not set."""

    @staticmethod
    @abc.abstractmethod
    def parse_body(body: Mapping[str, Any]) -> Completion:
        """The completion in a decoded response body; ValueError when it is unusable."""

    @staticmethod
    @abc.abstractmethod
    def stream_reader() -> StreamReader:
        """A reader of one stream's events into the body a non-streamed answer would have had."""

    @abc.abstractmethod
    def _plan_for(self, params: RequestParams) -> ParamPlan:
        """Where each request parameter goes for this provider and model."""

    @abc.abstractmethod
    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The wire fields of one completion request besides model and sampling parameters."""

    def _warning_subject(self) -> str:
        """How the dropped-parameters warning names this provider: by its model, unless it says otherwise."""
        return f"{self._label} (model {self._model})"

    # LLMProvider

    @property
    def name(self) -> str:
        """The provider's name in the deployment."""
        return self._name

    @property
    def model(self) -> str:
        """The model id sent to the provider."""
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
            LLMError: The key is missing, the call failed after retries, or the reply is unusable.
        """
        if self._client is None:
            raise LLMError(self._key_problem or self._label)
        self._warn_dropped_once()
        plan = self._plan if params is None or params is self._defaults else self._plan_for(params)
        request = {
            "model": self._model,
            **self._request_body(system, messages, tools),
            **plan.wire_fields(with_tools=bool(tools)),
        }
        started = time.monotonic()
        if on_text is not None and self._streaming:
            return await self._streamed(request, on_text, started)
        try:
            # The SDKs' typed create() walks every message through a TypedDict transform (~60 ms
            # per call on a short conversation); post() keeps their retries, timeouts, auth
            # headers and errors and sends our wire-shaped body as is.
            response = await self._client.post(self.completion_path, cast_to=httpx2.Response, body=request)
            body = response.json()
        except self.sdk_errors.base as exc:
            raise self._failed(exc, started) from None
        except ValueError:
            raise LLMError(f"{self._label}: the response is not JSON") from None
        return self._completion(body, "response")

    async def _streamed(self, request: dict[str, Any], on_text: TextSink, started: float) -> Completion:
        """The completion asked for as a stream: text to `on_text` as it comes, then the whole.

        The stream's events are folded into the body a non-streamed answer has, so one parser
        reads both. The SDK retries the request until the stream begins; a stream broken later is
        an error (its text already went out, so a retry would repeat it).
        """
        reader = self.stream_reader()
        try:
            stream = await self._client.post(
                self.completion_path,
                cast_to=object,
                body={**request, **self.stream_fields},
                stream=True,
                stream_cls=self.sdk_stream,
            )
            async for batch in stream:  # the events of one network read
                text = "".join([reader.feed(event) for event in batch if isinstance(event, dict)])
                if text:
                    await on_text(text)
        except self.sdk_errors.base as exc:
            raise self._failed(exc, started) from None
        except ValueError:
            raise LLMError(f"{self._label}: a stream event is not JSON") from None
        return self._completion(reader.body(), "streamed response")

    def _failed(self, exc: Exception, started: float) -> LLMError:
        """The error of a request the SDK gave up on (after its retries)."""
        return self._error(exc, self._timeout, attempts=self._attempts, elapsed=time.monotonic() - started)

    def _completion(self, body: object, what: str) -> Completion:
        """The parsed body; LLMError naming what was unusable (the key scrubbed from the text)."""
        try:
            if not isinstance(body, Mapping):
                raise ValueError("the response is not a JSON object")
            return self.parse_body(body)
        except ValueError as exc:
            raise LLMError(self._safe(f"{self._label}: unusable {what}: {exc}")) from None

    def check_params(self, params: RequestParams) -> None:
        """Refuse a call's own parameters that this provider and model do not take.

        Those it ignores by design (OpenAI's topK) are logged as a warning, not refused.

        Raises:
            ParamsNotTaken: The message names each such parameter and the provider.
        """
        plan = self._plan_for(params)
        check_call_params(plan, self._warning_subject())
        if plan.ignored:
            log.warning(ignored_warning(plan, self._warning_subject()))

    async def preflight(self) -> ProviderCheck:
        """Check the key and that the model exists (`pallas_io.llm_check`); never raises."""
        verdict = await check_provider(self._endpoint, time_limit=self.preflight_timeout)
        return ProviderCheck(verdict.ok, verdict.message, time.monotonic())

    async def _probe(self, path: str, body: dict[str, Any], where: str) -> ProviderCheck:
        """A free request to `path` on the model (token counting), once, as the health check.

        For cloud platforms without a models endpoint: the request goes through the key, the
        model and the platform's project and region, so a wrong one shows in `get_health`.
        `where` names the platform in the message. Never raises.
        """
        if self._client is None:
            return ProviderCheck(False, self._key_problem or self._label, time.monotonic())
        client = self._client.with_options(max_retries=0, timeout=self.preflight_timeout)
        try:
            async with asyncio.timeout(self.preflight_timeout):
                await client.post(path, cast_to=httpx2.Response, body={"model": self._model, **body})
        except self.sdk_errors.base as exc:
            failure = self._error(exc, self.preflight_timeout)
            return ProviderCheck(False, f"{failure} ({where}, model {self._model!r})", time.monotonic())
        except TimeoutError:
            message = f"{self._label}: {where} did not answer within {self.preflight_timeout:g}s"
            return ProviderCheck(False, message, time.monotonic())
        return ProviderCheck(True, f"{self._label}: {where}: model {self._model!r} answers", time.monotonic())

    def with_model(self, option: ModelOption) -> SdkProvider:
        """This provider serving another of its models, on the same client and connections."""
        twin = copy.copy(self)
        twin._model = option.model
        twin._capabilities = option.capabilities
        twin._plan = twin._plan_for(self._defaults)
        twin._owns_client = False
        return twin

    def with_key(self, key: str) -> SdkProvider:
        """This provider sending `key` (a caller's bearer token) on a client of its own.

        The client is the caller's alone and closed with `aclose` after the call: nothing one
        caller's key opened is reused for another caller. Errors are scrubbed of `key` too.
        """
        twin = copy.copy(self)
        twin._key = key
        twin._key_problem = None
        twin._client = self._make_client(key, self._provider)
        twin._owns_client = True
        return twin

    async def aclose(self) -> None:
        """Close the SDK client's connections (not those of the provider it was made from)."""
        if self._client is not None and self._owns_client:
            await self._client.close()

    # helpers

    def _make_client(self, api_key: str, provider: ProviderConfig) -> Any:
        # Retries and timeouts are the SDK's, set from the provider config; the SDK's own client
        # settings run on the agent's aiohttp transport (see http_transport).
        return self.sdk_client(
            api_key=api_key,
            base_url=self._base_url,
            timeout=provider.timeout_seconds,
            max_retries=provider.max_retries,
            http_client=self.sdk_http_client(transport=AiohttpTransport(trace_headers=True)),
        )

    def _warn_dropped_once(self) -> None:
        if self._warned:
            return
        self._warned = True
        warning = dropped_warning(self._plan, self._warning_subject())
        if warning:
            log.warning(warning)

    def _safe(self, text: str) -> str:
        return safe(text, self._key)

    def _error(
        self, exc: Exception, timeout: float, *, attempts: int = 1, elapsed: float | None = None
    ) -> LLMError:
        return describe(
            exc,
            sdk=self.sdk_errors,
            label=self._label,
            base_url=self._base_url,
            secret=self._key,
            timeout=timeout,
            attempts=attempts,
            elapsed=elapsed,
        )
