"""Which sampling parameters each provider and model takes, and where each goes on the wire.

The agent's `RequestParams` are written once per agent and may outlive a change of model, so a
parameter the target does not support is dropped (the adapter warns once) instead of failing
every call. The matrix:

| param       | OpenAI (api.openai.com)  | OpenAI-compatible (vLLM…) | Anthropic                    |
|-------------|--------------------------|---------------------------|------------------------------|
| temperature | `temperature`            | `temperature`             | `temperature`¹ (extra body)  |
| top_p       | `top_p`                  | `top_p`                   | `top_p`¹ (extra body)        |
| top_k       | dropped                  | `top_k` (extra body)      | `top_k`¹ (extra body)        |
| max_tokens  | `max_completion_tokens`  | `max_tokens`              | `max_tokens`, always sent²   |
| stop        | `stop`                   | `stop`                    | `stop_sequences`             |
| seed        | `seed`                   | `seed`                    | dropped                      |
| effort      | `reasoning_effort`       | `reasoning_effort`        | `output_config.effort`³      |

¹ Not for models whose rule in `ANTHROPIC_MODEL_RULES` says `sampling=False` (Claude Opus 4.7).
  The Anthropic SDK has no keyword for them, so they ride in the SDK's `extra_body`.
² The Messages API requires it; unset, it is the model's `capabilities.maxOutputTokens`.
³ Only for models whose rule says `effort=True`; other Claude models reject `output_config.effort`.

Native OpenAI takes `max_completion_tokens` because its reasoning models reject `max_tokens`;
OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LiteLLM) all read `max_tokens`, and not all of
them read the newer name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pallas_api.config import ModelCapabilities, RequestParams

SAMPLING = ("temperature", "top_p", "top_k")


@dataclass(frozen=True, slots=True)
class ModelRule:
    """What one Claude model family accepts beyond the parameters every model takes."""

    family: str
    """Model id without its date suffix, e.g. `claude-opus-4-7` (also matches `claude-opus-4-7-2026…`)."""
    sampling: bool
    """Takes temperature, top_p and top_k."""
    effort: bool
    """Takes `output_config: {"effort": ...}`."""


ANTHROPIC_MODEL_RULES: tuple[ModelRule, ...] = (
    # Opus 4.7 steers by effort alone: the API rejects numeric sampling dials for it.
    ModelRule("claude-opus-4-7", sampling=False, effort=True),
    ModelRule("claude-opus-4-6", sampling=True, effort=True),
    ModelRule("claude-sonnet-4-6", sampling=True, effort=True),
    ModelRule("claude-opus-4-5", sampling=True, effort=True),
)
"""Claude families that differ from `DEFAULT_ANTHROPIC_RULE`; extend it when a model ships."""

DEFAULT_ANTHROPIC_RULE = ModelRule("", sampling=True, effort=False)
"""Any other Claude model: sampling parameters yes, effort no."""


@dataclass(frozen=True, slots=True)
class ParamPlan:
    """Where each configured parameter goes for one provider and model.

    `kwargs` are the fields the SDK's typed create call has keywords for and `extra_body` those
    it has none for; the adapters send both as top-level request fields (`wire_fields()`).
    `dropped` names the configured parameters the target does not take.
    """

    kwargs: dict[str, Any] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    def wire_fields(self) -> dict[str, Any]:
        """Every field this plan adds to the request body, as it appears on the wire."""
        return {**self.kwargs, **self.extra_body}


def is_native_openai(base_url: str | None) -> bool:
    """Whether `base_url` is OpenAI's own API (no base URL means the SDK default, which is).

    Args:
        base_url: The configured base URL, or None for the SDK default.

    Returns:
        True for api.openai.com and its regional hosts; False for any other server.
    """
    if base_url is None:
        return True
    host = urlsplit(base_url).hostname or ""
    return host == "api.openai.com" or host.endswith(".api.openai.com")


def anthropic_rule(model: str) -> ModelRule:
    """The rule for a Claude model id, matched by family with or without a date or vendor prefix.

    Args:
        model: The model id sent to the provider, e.g. `claude-opus-4-7` or
            `anthropic.claude-opus-4-7-20260101-v1:0`.

    Returns:
        The matching rule from `ANTHROPIC_MODEL_RULES`, else `DEFAULT_ANTHROPIC_RULE`.
    """
    for rule in ANTHROPIC_MODEL_RULES:
        if re.search(rf"(?:^|[./]){re.escape(rule.family)}(?:$|[-@:])", model):
            return rule
    return DEFAULT_ANTHROPIC_RULE


def openai_plan(params: RequestParams, *, native: bool) -> ParamPlan:
    """Map request parameters onto a Chat Completions request.

    Args:
        params: The agent's sampling parameters.
        native: Whether the server is api.openai.com (see `is_native_openai`).

    Returns:
        The plan: SDK keywords, extra body fields and the names of dropped parameters.
    """
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    dropped: list[str] = []
    if params.temperature is not None:
        kwargs["temperature"] = params.temperature
    if params.top_p is not None:
        kwargs["top_p"] = params.top_p
    if params.top_k is not None:
        if native:
            dropped.append("top_k")
        else:
            extra["top_k"] = params.top_k
    if params.max_tokens is not None:
        kwargs["max_completion_tokens" if native else "max_tokens"] = params.max_tokens
    if params.stop:
        kwargs["stop"] = list(params.stop)
    if params.seed is not None:
        kwargs["seed"] = params.seed
    if params.effort is not None:
        kwargs["reasoning_effort"] = params.effort
    return ParamPlan(kwargs=kwargs, extra_body=extra, dropped=tuple(dropped))


def anthropic_plan(params: RequestParams, *, model: str, capabilities: ModelCapabilities) -> ParamPlan:
    """Map request parameters onto a Messages API request for `model`.

    Args:
        params: The agent's sampling parameters.
        model: The Claude model id; its rule decides sampling and effort support.
        capabilities: The model's declared limits; `max_output_tokens` is the default `max_tokens`.

    Returns:
        The plan: SDK keywords (always with `max_tokens`), extra body fields and dropped names.
    """
    rule = anthropic_rule(model)
    kwargs: dict[str, Any] = {"max_tokens": params.max_tokens or capabilities.max_output_tokens}
    extra: dict[str, Any] = {}
    dropped: list[str] = []
    for name in SAMPLING:
        value = getattr(params, name)
        if value is None:
            continue
        if rule.sampling:
            extra[name] = value
        else:
            dropped.append(name)
    if params.stop:
        kwargs["stop_sequences"] = list(params.stop)
    if params.seed is not None:
        dropped.append("seed")
    if params.effort is not None:
        if rule.effort:
            kwargs["output_config"] = {"effort": params.effort}
        else:
            dropped.append("effort")
    return ParamPlan(kwargs=kwargs, extra_body=extra, dropped=tuple(dropped))


def dropped_warning(plan: ParamPlan, provider: str) -> str | None:
    """The one warning an adapter logs about `plan`, or None when nothing was dropped.

    Args:
        plan: The plan computed for the provider and model.
        provider: How the provider is named in logs, e.g. `anthropic provider 'claude' (claude-opus-4-7)`.

    Returns:
        A sentence naming the dropped parameters and the provider, or None.
    """
    if not plan.dropped:
        return None
    names = ", ".join(plan.dropped)
    return f"{provider} does not take {names}; dropping {'it' if len(plan.dropped) == 1 else 'them'}"
