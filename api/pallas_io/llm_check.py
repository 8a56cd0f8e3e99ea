"""Checking an LLM provider's endpoint and key: the one provider check of the product.

Used by an agent for its own provider and model (the startup preflight, refreshed by
`get_health`) and by a deployment's registry for every provider of the deployment, used by an
agent or not (docs/api.md §4: the original start-up preflight, its "key set, not active" column
included). Both ask
the provider's models endpoint, never for a completion:

| provider  | models in use                              | none (key set, not active)              |
|-----------|--------------------------------------------|-----------------------------------------|
| openai    | `GET {base}/models` lists each of them     | `GET {base}/models` answers             |
| anthropic | `GET {base}/v1/models/{model}`, each       | `GET {base}/v1/models?limit=1` answers  |
| gemini    | `GET {base}/models/{model}`, each          | `GET {base}/models?pageSize=1` answers  |

It speaks plain HTTP rather than through the vendors' SDKs, as the MCP probe does: the registry
must not load them (over a second of imports each, and the agent's `llm` package is not its to
import), and a few GETs under one deadline need none of their retries. The headers are the ones
the SDKs send: `Authorization: Bearer <key>` (openai), `x-api-key` and `anthropic-version`
(anthropic), `x-goog-api-key` (gemini); none when the provider has no key (a local server).

A check never raises: a failure is a verdict whose message names the provider, what was asked
and what the provider said, in at most `MAX_MESSAGE` characters and never with the key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

import httpx2

from pallas_io.probe import describe_transport_failure

ProviderType = Literal["openai", "anthropic", "gemini", "bedrock"]
PUBLIC_APIS: Final[Mapping[str, str]] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}
"""The vendors' public APIs: the endpoint of a provider without `baseURL`."""
ANTHROPIC_VERSION: Final = "2023-06-01"
"""The Messages API version the anthropic SDK sends with every request."""
CHECK_TIMEOUT: Final = 5.0
"""Seconds for one provider's whole check, as the original preflight."""
MAX_MESSAGE: Final = 300


def provider_label(provider_type: str, name: str) -> str:
    """How every message names a provider: `openai provider 'vllm'`."""
    return f"{provider_type} provider '{name}'"


def missing_key(label: str, key_source: str) -> str:
    """The one sentence for a provider whose key has no value, naming what the user sets."""
    return f"{label}: no API key: {key_source} is not set"


def redact(text: str, key: str | None) -> str:
    """`text` with the key (and `Bearer <key>`) replaced."""
    if key:
        text = text.replace(f"Bearer {key}", "Bearer [redacted]").replace(key, "[redacted]")
    return text


def error_detail(body: object, fallback: str) -> str:
    """The provider's own error message from a decoded error body.

    OpenAI, Anthropic and llama.cpp nest {"error": {"message"}}; vLLM sends
    {"object": "error", "message"}; the SDKs may already have unwrapped "error".
    """
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body:
        return body
    return fallback


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """One provider to check, and everything its check depends on."""

    name: str
    type: ProviderType
    base_url: str | None = None
    """`baseURL`; None: the vendor's public API."""
    models: tuple[str, ...] = ()
    """Models to look for; empty: no agent uses the provider, so only the key is proved."""
    key_source: str | None = None
    """Where the key comes from in the user's words; None: the provider takes no key."""
    key: str | None = field(default=None, repr=False)
    """The key's value (None: not configured, or its source is not set)."""
    region: str | None = None
    """For a `bedrock` provider, or an `anthropic` one on Amazon Bedrock or Vertex AI: its cloud
    region (neither serves the models endpoint the check asks)."""

    @property
    def label(self) -> str:
        """How messages name it: `openai provider 'vllm'`."""
        return provider_label(self.type, self.name)

    @property
    def base(self) -> str:
        """The endpoint: `baseURL`, else the vendor's public API."""
        if self.type == "bedrock":  # Bedrock's runtime is per region, not one public API
            return (self.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com").rstrip("/")
        return (self.base_url or PUBLIC_APIS[self.type]).rstrip("/")

    @property
    def key_problem(self) -> str | None:
        """Why no request can succeed: the key's source is named but has no value."""
        if self.key_source is not None and self.key is None:
            return missing_key(self.label, self.key_source)
        return None


class Verdict(NamedTuple):
    """What one check found; `message` is safe to show and to publish."""

    ok: bool
    message: str


def _names(models: tuple[str, ...]) -> str:
    quoted = ", ".join(repr(m) for m in models)
    return f"models {quoted}" if len(models) > 1 else f"model {quoted}"


def _available(models: tuple[str, ...]) -> str:
    return f"{_names(models)} {'are' if len(models) > 1 else 'is'} available"


class _Asking:
    """The URL a check is waiting on, for the message when its deadline passes."""

    def __init__(self, endpoint: ProviderEndpoint, client: httpx2.AsyncClient) -> None:
        self.url = endpoint.base
        self._endpoint = endpoint
        self._client = client

    async def get(self, path: str, shown: str | None = None) -> httpx2.Response:
        endpoint = self._endpoint
        self.url = endpoint.base + (shown or path)
        headers = {}
        if endpoint.type == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
            if endpoint.key:
                headers["x-api-key"] = endpoint.key
        elif endpoint.type == "gemini":
            if endpoint.key:
                headers["x-goog-api-key"] = endpoint.key
        elif endpoint.key:
            headers["Authorization"] = f"Bearer {endpoint.key}"
        return await self._client.get(endpoint.base + path, headers=headers)

    def refused(self, response: httpx2.Response) -> str:
        """`GET <url>: HTTP <status>: <the provider's words>`."""
        try:
            body = response.json()
        except ValueError:
            body = None
        detail = error_detail(body, response.reason_phrase or "error")
        return f"GET {self.url}: HTTP {response.status_code}: {detail}"


async def _openai(asking: _Asking, models: tuple[str, ...]) -> Verdict:
    response = await asking.get("/models")
    if response.status_code != 200:
        return Verdict(False, asking.refused(response))
    try:
        listed = {str(m.get("id")) for m in response.json().get("data", []) if isinstance(m, dict)}
    except (ValueError, AttributeError):
        return Verdict(False, f"GET {asking.url}: the answer is not a model list")
    missing = tuple(m for m in models if m not in listed)
    if missing:
        return Verdict(False, f"{_names(missing)} not found at {asking.url}")
    if models:
        return Verdict(True, _available(models))
    return Verdict(True, f"not used by any agent; {asking.url} lists {len(listed)} models")


async def _anthropic(asking: _Asking, models: tuple[str, ...]) -> Verdict:
    return await _each_model(asking, models, "/v1/models", "?limit=1")


async def _gemini(asking: _Asking, models: tuple[str, ...]) -> Verdict:
    return await _each_model(asking, models, "/models", "?pageSize=1")


async def _each_model(asking: _Asking, models: tuple[str, ...], listing: str, one: str) -> Verdict:
    """Each model asked for by name under `listing`; without models, a one-model listing."""
    if not models:
        response = await asking.get(listing + one, shown=listing)
        if response.status_code != 200:
            return Verdict(False, asking.refused(response))
        return Verdict(True, f"not used by any agent; {asking.url} answers")
    for model in models:
        response = await asking.get(f"{listing}/{model}")
        if response.status_code == 404:
            return Verdict(False, f"model {model!r} not found at {asking.url}")
        if response.status_code != 200:
            return Verdict(False, asking.refused(response))
    return Verdict(True, _available(models))


async def check_provider(
    endpoint: ProviderEndpoint, *, time_limit: float = CHECK_TIMEOUT, client: httpx2.AsyncClient | None = None
) -> Verdict:
    """Whether the provider answers with its key and serves the models, within `time_limit` seconds.

    Args:
        endpoint: The provider, its key and the models to look for.
        time_limit: Seconds for the whole check.
        client: An HTTP client to send through (the registry keeps one for all its checks);
            by default one is opened for this check.

    Returns:
        The verdict; a key that is named but unset fails without a request.
    """
    if (problem := endpoint.key_problem) is not None:
        return Verdict(False, problem)
    if endpoint.region is not None:
        # Neither bedrock-runtime nor Vertex AI's prediction API has a models endpoint, and
        # listing models is another service a key for calls only may not reach: the first call tells.
        where = endpoint.base_url or f"region {endpoint.region}"
        # Without a key the agent's pod signs or mints with its cloud identity, which only the
        # agent's own check (get_health) goes through.
        credentials = "key set" if endpoint.key_source is not None else "the pod's cloud credentials"
        return Verdict(True, f"{endpoint.label}: cloud platform ({where}); {credentials}, not probed")
    if client is None:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(time_limit)) as own:
            return await check_provider(endpoint, time_limit=time_limit, client=own)
    asking = _Asking(endpoint, client)
    try:
        async with asyncio.timeout(time_limit):
            check = {"anthropic": _anthropic, "gemini": _gemini}.get(endpoint.type, _openai)
            ok, text = await check(asking, endpoint.models)
    except (TimeoutError, httpx2.TimeoutException):
        ok, text = False, f"GET {asking.url} timed out after {time_limit:g}s"
    except httpx2.HTTPError as exc:
        ok, text = (
            False,
            f"cannot reach {endpoint.base}: {describe_transport_failure(exc) or type(exc).__name__}",
        )
    except Exception as exc:  # noqa: BLE001 - a check reports every failure instead of raising it
        ok, text = False, f"GET {asking.url} failed: {type(exc).__name__}: {exc}"
    return Verdict(ok, redact(f"{endpoint.label}: {text}", endpoint.key)[:MAX_MESSAGE])
