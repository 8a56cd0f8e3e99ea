"""Build the agent's LLM provider from its configuration and the process environment."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Mapping

from pallas_api.config import AgentConfig, ProviderConfig
from pallas_runtime.llm.deferred import DeferredProvider
from pallas_runtime.llm.provider import LLMProvider

NO_KEY_PLACEHOLDER = "not-needed"
"""Sent when the provider names no key variable: local vLLM or llama.cpp servers check none, but
the SDKs refuse to build a client without one."""


def resolve_api_key(provider: ProviderConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key to send to `provider`.

    Args:
        provider: The provider configuration; `api_key_env` names the variable holding the key.
        environ: Where to read it; the process environment by default.

    Returns:
        The key; `NO_KEY_PLACEHOLDER` when the provider names no variable; None when the named
        variable is unset or empty.
    """
    if provider.api_key_env is None:
        return NO_KEY_PLACEHOLDER
    env = os.environ if environ is None else environ
    return env.get(provider.api_key_env) or None


def create_provider(config: AgentConfig, environ: Mapping[str, str] | None = None) -> LLMProvider:
    """The provider adapter for `config.provider.type`, holding the key read from the environment.

    A missing key does not fail here, so the agent still starts and reports it: the provider's
    `preflight()` says which variable is unset and `complete()` raises LLMError saying the same.

    Args:
        config: The agent's configuration.
        environ: Where to read the key variable; the process environment by default.

    Returns:
        An OpenAIChatProvider (type `openai`), an OpenAIResponsesProvider (type `openai` with
        `api: responses`), an AnthropicMessagesProvider (type `anthropic`), or an
        AnthropicBedrockProvider or AnthropicVertexProvider (type `anthropic` on `platform:
        bedrock` or `vertex`), a GeminiProvider (type `gemini`, on the Gemini API or Vertex), or a
        BedrockConverseProvider (type `bedrock`: the Converse API, with a Bedrock API key or the AWS
        credential chain).
    """
    api_key = resolve_api_key(config.provider, environ)
    # Each SDK costs over a second of imports; an agent loads only the one it uses.
    module, name = adapter_of(config)
    adapter: Callable[..., LLMProvider] = getattr(importlib.import_module(module), name)
    if config.provider.type == "bedrock":
        return adapter(config, api_key=api_key if config.provider.api_key_env else None)
    return adapter(config, api_key=api_key)


def adapter_of(config: AgentConfig) -> tuple[str, str]:
    """The module and class of the adapter for `config.provider` (importing the module loads its SDK)."""
    provider = config.provider
    if provider.type == "gemini":
        return "pallas_runtime.llm.gemini", "GeminiProvider"
    if provider.type == "bedrock":
        return "pallas_runtime.llm.bedrock_converse", "BedrockConverseProvider"
    if provider.type == "anthropic" and provider.platform == "bedrock":
        return "pallas_runtime.llm.anthropic_bedrock", "AnthropicBedrockProvider"
    if provider.type == "anthropic" and provider.platform == "vertex":
        return "pallas_runtime.llm.anthropic_vertex", "AnthropicVertexProvider"
    if provider.type == "anthropic":
        return "pallas_runtime.llm.anthropic_messages", "AnthropicMessagesProvider"
    if provider.api == "responses":
        return "pallas_runtime.llm.openai_responses", "OpenAIResponsesProvider"
    return "pallas_runtime.llm.openai_chat", "OpenAIChatProvider"


def deferred_provider(config: AgentConfig, environ: Mapping[str, str] | None = None) -> LLMProvider:
    """`create_provider(config, environ)`, with its SDK imported at first use (`llm.deferred`)."""
    return DeferredProvider(
        config, adapter_of(config)[0], functools.partial(create_provider, config, environ)
    )
