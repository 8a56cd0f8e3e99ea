"""Google's Gemini models behind the Gemini API's own wire format (`type: gemini`).

No SDK: google-genai is not among the locked packages, and the API is a few JSON endpoints. A
small client on httpx2 (over the agent's aiohttp transport, as the SDKs' clients are) gives the
shared adapter (`SdkProvider`) what it asks of an SDK client: `post` with retries on 429, 5xx
and broken connections, the errors as exception classes, a stream of decoded events.

- `platform: direct`: `POST {baseURL}/models/{model}:generateContent` (default baseURL
  `https://generativelanguage.googleapis.com/v1beta`), the key in `x-goog-api-key`.
- `platform: vertex`: the same bodies at
  `{endpoint}/projects/{project}/locations/{region}/publishers/google/models/{model}:generateContent`,
  the key an OAuth access token sent as a bearer (as the Anthropic-on-Vertex adapter takes it),
  or with no `apiKey` one minted from Application Default Credentials (`llm/google_token.py`).

A stream is `:streamGenerateContent?alt=sse`: server-sent events, each a whole response chunk.
The health check counts the tokens of a one-word message (`:countTokens`, free): it goes through
the key, the model (and on Vertex the project and region), so a wrong one shows in `get_health`.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import httpx2

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_api.fields import RequestParams
from pallas_io.llm_check import PUBLIC_APIS
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.adapter import SdkProvider
from pallas_runtime.llm.errors import SdkErrors
from pallas_runtime.llm.gemini_request import gemini_plan, gemini_request
from pallas_runtime.llm.gemini_response import GeminiStreamReader, completion_from_gemini
from pallas_runtime.llm.google_token import GoogleCredentialsError, GoogleToken
from pallas_runtime.llm.params import ParamPlan
from pallas_runtime.llm.provider import ProviderCheck
from pallas_runtime.llm.retries import RETRIED, retry_pause
from pallas_runtime.llm.sse import event_batches
from pallas_runtime.llm.vertex import vertex_base_url
from pallas_runtime.messages import Message, ToolSpec


class GeminiError(Exception):
    """Any failure of a Gemini request."""


class GeminiTimeout(GeminiError):
    """The request took longer than the provider's timeout."""


class GeminiConnection(GeminiError):
    """The server could not be reached (the cause is chained)."""


class GeminiStatus(GeminiError):
    """The server answered with an error status; `body` is its decoded error, if JSON."""

    def __init__(self, status_code: int, body: object) -> None:
        super().__init__(f"Error code: {status_code}")
        self.status_code = status_code
        self.body = body


class GeminiClient:
    """What `SdkProvider` needs of an SDK client, for the Gemini API's endpoints.

    Args:
        models_url: The URL under which a model's methods are (`…/models`).
        headers: The authentication header.
        token: Where a bearer token comes from for each request, instead of `headers` (Vertex
            with Application Default Credentials).
        timeout: Seconds for one request.
        max_retries: Further attempts after a retryable failure.
    """

    def __init__(
        self,
        models_url: str,
        headers: dict[str, str],
        *,
        timeout: float,
        max_retries: int,
        http: httpx2.AsyncClient | None = None,
        token: GoogleToken | None = None,
    ) -> None:
        self._models_url = models_url
        self._headers = headers
        self._token = token
        self._timeout = timeout
        self._max_retries = max_retries
        self._http = http or httpx2.AsyncClient(transport=AiohttpTransport(trace_headers=True))

    def with_options(self, *, max_retries: int, timeout: float) -> GeminiClient:
        """This client with other retry and timeout settings, on the same connections."""
        twin = copy.copy(self)
        twin._max_retries = max_retries
        twin._timeout = timeout
        return twin

    async def post(
        self,
        path: str,
        *,
        cast_to: object,
        body: Mapping[str, Any],
        stream: bool = False,
        stream_cls: object = None,
    ) -> Any:
        """Call `path` (`:generateContent`, `:countTokens`) on the body's `model`.

        Returns:
            The response, read (`stream` false), or the stream's event batches.

        Raises:
            GeminiError: After the retries, the last failure.
        """
        payload = dict(body)
        model = payload.pop("model")
        method = ":streamGenerateContent" if stream else path
        url = f"{self._models_url}/{model}{method}"
        params = {"alt": "sse"} if stream else None
        response = await self._send(url, payload, params, stream=stream)
        return _events(response) if stream else response

    async def _send(
        self, url: str, payload: dict[str, Any], params: dict[str, str] | None, *, stream: bool
    ) -> httpx2.Response:
        attempt = 0
        while True:
            request = self._http.build_request(
                "POST", url, json=payload, params=params, headers=await self._auth(), timeout=self._timeout
            )
            retry_after: float | None = None
            try:
                response = await self._http.send(request, stream=stream)
            except httpx2.TimeoutException as exc:
                failure: GeminiError = GeminiTimeout(str(exc))
                failure.__cause__ = exc
            except httpx2.TransportError as exc:
                failure = GeminiConnection(str(exc))
                failure.__cause__ = exc
            else:
                if response.status_code < 400:
                    return response
                await response.aread()
                failure = GeminiStatus(response.status_code, _decoded(response))
                if response.status_code not in RETRIED:
                    raise failure
                retry_after = _seconds(response.headers.get("retry-after"))
            if attempt >= self._max_retries:
                raise failure
            await asyncio.sleep(retry_pause(attempt, retry_after))
            attempt += 1

    async def _auth(self) -> dict[str, str]:
        """The authentication header: the key's, or a bearer token fresh enough for this request."""
        if self._token is None:
            return self._headers
        try:
            return {"Authorization": f"Bearer {await self._token.bearer()}"}
        except GoogleCredentialsError as exc:
            raise GeminiConnection(str(exc)) from None

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()


def _decoded(response: httpx2.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return response.text or None


def _seconds(value: str | None) -> float | None:
    try:
        return min(float(value), 60.0) if value is not None else None
    except ValueError:
        return None


async def _events(response: httpx2.Response) -> AsyncIterator[list[object]]:
    """The stream's chunks, one batch per network read; an `error` chunk raises GeminiStatus."""
    async for batch in event_batches(response):
        events: list[object] = []
        for _name, data in batch:
            if isinstance(data, dict) and "error" in data:
                if events:
                    yield events
                error = data["error"]
                code = error.get("code") if isinstance(error, dict) else None
                raise GeminiStatus(code if isinstance(code, int) else 500, data)
            events.append(data)
        yield events


class GeminiProvider(SdkProvider):
    """One Gemini model on the Gemini API or on Vertex AI (`platform: vertex`)."""

    kind = "gemini"
    completion_path = ":generateContent"
    sdk_client = GeminiClient
    sdk_http_client = httpx2.AsyncClient
    sdk_errors = SdkErrors(GeminiError, GeminiTimeout, GeminiConnection, GeminiStatus)
    sdk_stream = object
    # The method (`:streamGenerateContent?alt=sse`) asks for the stream, not a field.
    stream_fields = MappingProxyType({})
    parse_body = staticmethod(completion_from_gemini)
    stream_reader = staticmethod(GeminiStreamReader)

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._vertex = config.provider.platform == "vertex"
        self._region = config.provider.region or ""
        self._project = config.provider.project_id or ""
        super().__init__(config, api_key=api_key)
        if self._vertex and self._client is None and self._key_problem is None:
            # No key named: tokens come from Application Default Credentials.
            self._client = GeminiClient(
                self._vertex_models(),
                {},
                timeout=config.provider.timeout_seconds,
                max_retries=config.provider.max_retries,
                token=GoogleToken(),
            )

    def _default_base_url(self) -> str:
        return vertex_base_url(self._region) if self._vertex else PUBLIC_APIS["gemini"]

    def _where(self) -> str:
        if self._vertex:
            return f"Vertex AI ({self._base_url}, project {self._project})"
        return self._base_url

    def _make_client(self, api_key: str, provider: ProviderConfig) -> GeminiClient:
        if self._vertex:
            models = self._vertex_models()
            headers = {"Authorization": f"Bearer {api_key}"}
        else:
            models = f"{self._base_url}/models"
            headers = {"x-goog-api-key": api_key}
        return GeminiClient(
            models, headers, timeout=provider.timeout_seconds, max_retries=provider.max_retries
        )

    def _vertex_models(self) -> str:
        return f"{self._base_url}/projects/{self._project}/locations/{self._region}/publishers/google/models"

    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        return gemini_request(system, messages, tools)

    def _plan_for(self, params: RequestParams) -> ParamPlan:
        return gemini_plan(
            params, model=self._model, capabilities=self._capabilities, subject=self._warning_subject()
        )

    async def preflight(self) -> ProviderCheck:
        """Count a one-word message's tokens on the model (`:countTokens`); never raises."""
        return await self._probe(
            ":countTokens", {"contents": [{"role": "user", "parts": [{"text": "ping"}]}]}, self._where()
        )
