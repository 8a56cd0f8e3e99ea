"""What the agent loop needs from an LLM provider; adapters live beside this module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pallas_api.config import ModelOption, ProviderConfig
from pallas_api.fields import RequestParams
from pallas_io.llm_check import missing_key, provider_label
from pallas_runtime.messages import Completion, Message, TextSink, ToolSpec


def missing_key_message(provider: ProviderConfig) -> str:
    """The one sentence for a provider without its key, naming what the user sets to give it."""
    return missing_key(provider_label(provider.type, provider.name), provider.api_key_origin())


class LLMError(Exception):
    """A model call that failed after retries. The text is safe to show: it never holds a key."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ProviderCheck:
    """The result of probing a provider's models endpoint (never a completion)."""

    ok: bool
    message: str
    checked_at: float
    """time.monotonic() when the check finished."""


class LLMProvider(Protocol):
    """One configured provider serving one model, with the agent's sampling parameters."""

    @property
    def name(self) -> str:
        """The provider's name in the deployment (`vllm`, `anthropic`, …)."""

    @property
    def model(self) -> str:
        """The model id sent to the provider."""

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        params: RequestParams | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        """One model turn with `params` (default: the agent's); LLMError once retries are spent.

        With `on_text` the completion is streamed (when the provider streams) and its text goes
        to `on_text` piece by piece as it arrives; the Completion returned is the same either way.
        """

    def with_model(self, option: ModelOption) -> LLMProvider:
        """This provider serving `option`'s model instead (sharing its connections)."""

    def with_key(self, key: str) -> LLMProvider:
        """This provider sending `key` (a caller's bearer) on its own client; `aclose` it after."""

    def check_params(self, params: RequestParams) -> None:
        """Refuse a call's own parameters the provider does not take (raises ParamsNotTaken)."""

    async def preflight(self) -> ProviderCheck:
        """Check the key and that the model exists via the models endpoint; never raises."""

    async def aclose(self) -> None:
        """Release connections."""
