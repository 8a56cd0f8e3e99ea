"""Anthropic's Messages API on Google Cloud's Vertex AI (`type: anthropic`, `platform: vertex`).

The anthropic SDK's `AsyncAnthropicVertex` sends the requests: it moves the model into the path
(`POST /projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`,
`:streamRawPredict` for a stream) and adds Vertex's `anthropic_version`. Its key is an OAuth
access token, sent as a bearer: the provider's Secret holds one (a token refresher may rewrite
it; the agent reads its keys anew for each turn), so google-auth, which the SDK would use to mint
tokens from a service account, is not needed. Bodies, answers and the SSE stream are the
Messages API's, so the Anthropic adapter is used as it is.

The health check counts the tokens of a one-word message (`count-tokens:rawPredict`, which costs
nothing): it goes through the token, the project, the region and the model, so an expired token
or a wrong region shows in `get_health` rather than only as failed turns.
"""

from __future__ import annotations

import time
from typing import Any

import anthropic

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_runtime.http_transport import AiohttpTransport
from pallas_runtime.llm.anthropic_messages import AnthropicMessagesProvider
from pallas_runtime.llm.provider import ProviderCheck


def vertex_base_url(region: str) -> str:
    """Vertex AI's endpoint for `region`, as the SDK derives it."""
    if region == "global":
        return "https://aiplatform.googleapis.com/v1"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com/v1"
    return f"https://{region}-aiplatform.googleapis.com/v1"


class AnthropicVertexProvider(AnthropicMessagesProvider):
    """One Claude model on Vertex AI, with an OAuth access token."""

    sdk_client = anthropic.AsyncAnthropicVertex

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._region = config.provider.region or ""
        self._project = config.provider.project_id or ""
        super().__init__(config, api_key=api_key)

    def _default_base_url(self) -> str:
        return vertex_base_url(self._region)

    def _make_client(self, api_key: str, provider: ProviderConfig) -> Any:
        return anthropic.AsyncAnthropicVertex(
            region=self._region,
            project_id=self._project,
            access_token=api_key,
            base_url=self._base_url,
            timeout=provider.timeout_seconds,
            max_retries=provider.max_retries,
            http_client=anthropic.DefaultAsyncHttpxClient(transport=AiohttpTransport()),
        )

    async def preflight(self) -> ProviderCheck:
        """Count a one-word message's tokens on the model; never raises.

        Vertex's prediction API has no models endpoint; counting goes through the token, the
        project, the region and the model, and costs nothing.
        """
        if self._client is None:
            return ProviderCheck(False, self._key_problem or self._label, time.monotonic())
        where = f"Vertex AI ({self._base_url}, project {self._project})"
        probe = {"model": self._model, "messages": [{"role": "user", "content": "ping"}]}
        # The SDK moves /v1/messages/count_tokens to Vertex's count-tokens:rawPredict.
        client = self._client.with_options(max_retries=0, timeout=self.preflight_timeout)
        return await self._probe(where, "/v1/messages/count_tokens", probe, client)
