"""The anthropic SDK's Bedrock and Vertex clients, credentialed by the pod's cloud identity.

The SDK's own paths for keyless use do not fit the agent: its Bedrock client signs through boto3,
which is not in the locks, and its Vertex client mints through google-auth but lets google-auth's
exceptions escape, which the adapter would not read as a failed request. `CloudAuthClient` goes
before the SDK's client class and replaces how a request is credentialed: `authorize` adds the
credentials (a SigV4 signature, a bearer token), and `CredentialsUnavailable` becomes the SDK's
connection error, so a turn fails with an LLM error and `get_health` shows why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Self

import anthropic
import httpx2

from pallas_api.config import ProviderConfig
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.errors import CredentialsUnavailable

Authorize = Callable[[httpx2.Request], Awaitable[None]]
"""Adds its credentials to a request about to be sent (raises CredentialsUnavailable)."""


class CloudAuthClient:
    """A mixin before `anthropic.AsyncAnthropicBedrock` or `AsyncAnthropicVertex`."""

    def __init__(self, *, authorize: Authorize, **options: Any) -> None:
        super().__init__(**options)
        self._authorize = authorize

    def copy(self, **options: Any) -> Self:
        """The SDK's copy (`with_options`), keeping how requests are credentialed."""
        # The SDK's class comes after this one in the subclass's bases: mypy cannot see its copy.
        twin: Self = super().copy(**options, _extra_kwargs={"authorize": self._authorize})  # type: ignore[misc]
        return twin

    with_options = copy

    async def _prepare_request(self, request: httpx2.Request) -> None:
        try:
            await self._authorize(request)
        except CredentialsUnavailable as exc:
            raise anthropic.APIConnectionError(message=str(exc), request=request) from None


def client_options(provider: ProviderConfig, base_url: str, **platform: str) -> dict[str, Any]:
    """What the SDK's Bedrock or Vertex client is built with, keyed or not.

    `platform` adds the platform's own (`aws_region`; `region` and `project_id`).
    """
    return {
        **platform,
        "base_url": base_url,
        "timeout": provider.timeout_seconds,
        "max_retries": provider.max_retries,
        "http_client": anthropic.DefaultAsyncHttpxClient(transport=AiohttpTransport()),
    }
