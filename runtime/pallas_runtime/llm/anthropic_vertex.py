"""Anthropic's Messages API on Google Cloud's Vertex AI (`type: anthropic`, `platform: vertex`).

The anthropic SDK's `AsyncAnthropicVertex` sends the requests: it moves the model into the path
(`POST /projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`,
`:streamRawPredict` for a stream) and adds Vertex's `anthropic_version`. Its key is an OAuth
access token, sent as a bearer: the provider's Secret holds one (a token refresher may rewrite
it; the agent reads its keys anew for each turn), or, with no `apiKey`, one minted from
Application Default Credentials (`llm/google_token.py`: GKE Workload Identity's metadata server,
a service-account key file, …) and refreshed before it expires. Bodies, answers and the SSE
stream are the Messages API's, so the Anthropic adapter is used as it is.

The health check counts the tokens of a one-word message (`count-tokens:rawPredict`, which costs
nothing): it goes through the token, the project, the region and the model, so an expired token
or a wrong region shows in `get_health` rather than only as failed turns.
"""

from __future__ import annotations

from typing import Any

import anthropic

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_runtime.llm.anthropic_messages import AnthropicMessagesProvider
from pallas_runtime.llm.cloud_auth import CloudAuthClient, client_options
from pallas_runtime.llm.google_token import GoogleToken
from pallas_runtime.llm.provider import ProviderCheck
from pallas_runtime.llm.vertex import vertex_base_url


class AdcVertexClient(CloudAuthClient, anthropic.AsyncAnthropicVertex):
    """The SDK's Vertex client sending tokens from Application Default Credentials."""


class AnthropicVertexProvider(AnthropicMessagesProvider):
    """One Claude model on Vertex AI, with an OAuth access token (given, or minted)."""

    sdk_client = anthropic.AsyncAnthropicVertex

    def __init__(self, config: AgentConfig, *, api_key: str | None) -> None:
        self._region = config.provider.region or ""
        self._project = config.provider.project_id or ""
        super().__init__(config, api_key=api_key)
        if self._client is None and self._key_problem is None:
            # No key named: tokens come from Application Default Credentials.
            token = GoogleToken()
            self._client = AdcVertexClient(authorize=token.authorize, **self._client_options(config.provider))

    def _default_base_url(self) -> str:
        return vertex_base_url(self._region)

    def _make_client(self, api_key: str, provider: ProviderConfig) -> Any:
        return anthropic.AsyncAnthropicVertex(access_token=api_key, **self._client_options(provider))

    def _client_options(self, provider: ProviderConfig) -> dict[str, Any]:
        return client_options(provider, self._base_url, region=self._region, project_id=self._project)

    async def preflight(self) -> ProviderCheck:
        """Count a one-word message's tokens on the model; never raises.

        Vertex's prediction API has no models endpoint; counting goes through the token, the
        project, the region and the model, and costs nothing.
        """
        where = f"Vertex AI ({self._base_url}, project {self._project})"
        # The SDK moves /v1/messages/count_tokens to Vertex's count-tokens:rawPredict.
        return await self._probe(
            "/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "ping"}]}, where
        )
