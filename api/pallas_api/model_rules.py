"""What each provider and model takes where they differ: Claude families, reasoning effort.

Pure knowledge shared by the renderer (which refuses an agent's `requestParams.effort` its
provider does not take, so the mistake shows at validation) and the runtime's adapters (which
refuse a call's own, and map the rest onto the wire).

Reasoning effort values taken, by provider (RequestParams.effort is `low|medium|high|xhigh|max`):

| provider                                   | values                         | evidence                   |
|--------------------------------------------|--------------------------------|----------------------------|
| OpenAI's own API (chat and responses)      | low, medium, high, xhigh, max  | openai `ReasoningEffort`   |
| OpenAI-compatible servers (vLLM, llama.cpp)| low, medium, high              | vLLM's `reasoning_effort`  |
| Claude Opus 4.7                            | low, medium, high, xhigh, max  | anthropic `OutputConfig`   |
| Claude Opus 4.6, Sonnet 4.6                | low, medium, high, max         | Anthropic's effort docs    |
| Claude Opus 4.5                            | low, medium, high              | Anthropic's effort docs    |
| other Claude models                        | none (`output_config` refused) |                            |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

BASIC_EFFORTS: Final = ("low", "medium", "high")
ALL_EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True, slots=True)
class ModelRule:
    """What one Claude model family accepts beyond the parameters every model takes."""

    family: str
    """Model id without its date suffix, e.g. `claude-opus-4-7` (also matches `claude-opus-4-7-2026…`)."""
    sampling: bool
    """Takes temperature, top_p and top_k."""
    efforts: tuple[str, ...] = ()
    """The `output_config.effort` values it takes; empty: it takes no `output_config.effort`."""

    @property
    def effort(self) -> bool:
        """Takes `output_config: {"effort": ...}` at all."""
        return bool(self.efforts)


ANTHROPIC_MODEL_RULES: tuple[ModelRule, ...] = (
    # Opus 4.7 steers by effort alone: the API rejects numeric sampling dials for it.
    ModelRule("claude-opus-4-7", sampling=False, efforts=ALL_EFFORTS),
    ModelRule("claude-opus-4-6", sampling=True, efforts=(*BASIC_EFFORTS, "max")),
    ModelRule("claude-sonnet-4-6", sampling=True, efforts=(*BASIC_EFFORTS, "max")),
    ModelRule("claude-opus-4-5", sampling=True, efforts=BASIC_EFFORTS),
)
"""Claude families that differ from `DEFAULT_ANTHROPIC_RULE`; extend it when a model ships."""

DEFAULT_ANTHROPIC_RULE = ModelRule("", sampling=True)
"""Any other Claude model: sampling parameters yes, effort no."""


def anthropic_rule(model: str) -> ModelRule:
    """The rule for a Claude model id, matched by family with or without a date or vendor prefix.

    Args:
        model: The model id sent to the provider, e.g. `claude-opus-4-7`,
            `anthropic.claude-opus-4-7-20260101-v1:0` (Bedrock) or `claude-opus-4-7@20260101`
            (Vertex).

    Returns:
        The matching rule from `ANTHROPIC_MODEL_RULES`, else `DEFAULT_ANTHROPIC_RULE`.
    """
    for rule in ANTHROPIC_MODEL_RULES:
        if re.search(rf"(?:^|[./]){re.escape(rule.family)}(?:$|[-@:])", model):
            return rule
    return DEFAULT_ANTHROPIC_RULE


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


def openai_efforts(*, native: bool) -> tuple[str, ...]:
    """The reasoning effort values an OpenAI-protocol server takes: OpenAI's own, or a compatible one's."""
    return ALL_EFFORTS if native else BASIC_EFFORTS


GEMINI_EFFORTS: Final = ("low", "high")
"""The `thinkingLevel` values every Gemini 3 model takes; earlier Gemini models have a thinking
budget in tokens instead, which no effort value names."""


def gemini_efforts(model: str) -> tuple[str, ...]:
    """The effort values a Gemini model takes: Gemini 3's thinking levels; none for older models."""
    return GEMINI_EFFORTS if model.removeprefix("models/").startswith("gemini-3") else ()


def efforts_taken(provider_type: str, base_url: str | None, model: str) -> tuple[str, ...]:
    """The reasoning effort values a provider takes for `model` (empty: it takes no effort)."""
    if provider_type == "anthropic":
        return anthropic_rule(model).efforts
    if provider_type == "gemini":
        return gemini_efforts(model)
    if provider_type == "bedrock":  # Converse has no effort field
        return ()
    return openai_efforts(native=is_native_openai(base_url))


def effort_refusal(
    effort: str, provider_type: str, base_url: str | None, model: str, subject: str
) -> str | None:
    """Why `effort` cannot go to this provider and model: a sentence naming both; None if it can.

    A provider that takes no effort at all is not refused here: an agent's own parameter is then
    dropped with a warning (its spec may outlive a change of model), a call's is refused as a
    parameter not taken.
    """
    taken = efforts_taken(provider_type, base_url, model)
    if not taken or effort in taken:
        return None
    return f"effort {effort!r} is not taken by {subject} (model {model!r}); it takes {', '.join(taken)}"
