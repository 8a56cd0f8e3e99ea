"""Which request parameters each provider and model takes, and where each goes on the wire.

The matrix (camelCase as in the spec; wire names as sent):

| param            | OpenAI (api.openai.com)  | OpenAI-compatible (vLLM…) | Anthropic                      |
|------------------|--------------------------|---------------------------|--------------------------------|
| temperature      | `temperature`            | `temperature`             | `temperature`¹                 |
| topP             | `top_p`                  | `top_p`                   | `top_p`¹                       |
| topK             | ignored⁸                 | `top_k`                   | `top_k`¹                       |
| maxTokens⁴       | `max_completion_tokens`  | `max_tokens`              | `max_tokens`, always sent²     |
| stop             | `stop`, first 4 kept⁵    | `stop`                    | `stop_sequences`               |
| seed             | `seed`                   | `seed`                    | not taken                      |
| effort⁷          | `reasoning_effort`       | `reasoning_effort`        | `output_config.effort`³        |
| presencePenalty  | `presence_penalty`       | `presence_penalty`        | not taken                      |
| frequencyPenalty | `frequency_penalty`      | `frequency_penalty`       | not taken                      |
| responseFormat   | `response_format`        | `response_format`         | `text` only (nothing sent)     |
| toolChoice⁶      | `tool_choice`            | `tool_choice`             | `tool_choice` (`required`: any)|
| extra            | top-level fields         | top-level fields          | top-level fields               |

¹ Not for models whose rule in `ANTHROPIC_MODEL_RULES` says `sampling=False` (Claude Opus 4.7).
² The Messages API requires it; unset, it is the model's `capabilities.maxOutputTokens`.
³ Only for models whose rule names effort values; other Claude models reject `output_config.effort`.
⁴ Clamped to the model's `capabilities.maxOutputTokens`.
⁵ OpenAI refuses more than 4 stop sequences; OpenAI-compatible servers take more.
⁶ Sent only with tools; a named tool is `{"type": "function", "function": {"name"}}` on OpenAI and
  `{"type": "tool", "name"}` on Anthropic (`auto`, `none`, `required` → `{"type": "auto"|"none"|"any"}`).
⁷ Values each provider and model takes: `pallas_api.model_rules`; a value not taken is refused
  (in an agent's spec when it is rendered, in a call's `params` as the call is checked).
⁸ The seed's word: "top_k: Anthropic-only; OpenAI ignores". OpenAI's APIs (Chat Completions and
  Responses) have no field for it, so it is not sent, and a warning says so; a call's own topK is
  not refused. Other Responses servers (OpenResponses, mistral.rs, SGLang, vLLM) take a top-level
  `top_k` and get it.

"Not taken": in an agent's `requestParams` (written once, possibly before a change of model) the
parameter is dropped and the adapter warns once; in a `send_message` call's `params` it is an
error naming the parameter and the provider (`check_call_params`).

Native OpenAI takes `max_completion_tokens` because its reasoning models reject `max_tokens`;
OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LiteLLM) all read `max_tokens`, and not all of
them read the newer name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic.alias_generators import to_camel

from pallas_api.fields import ModelCapabilities, RequestParams, ResponseFormat
from pallas_api.model_rules import (
    ANTHROPIC_MODEL_RULES,
    DEFAULT_ANTHROPIC_RULE,
    ModelRule,
    anthropic_rule,
    is_native_openai,
    openai_efforts,
)

__all__ = [
    "ANTHROPIC_MODEL_RULES",
    "DEFAULT_ANTHROPIC_RULE",
    "ModelRule",
    "ParamPlan",
    "ParamsNotTaken",
    "anthropic_plan",
    "anthropic_rule",
    "check_call_params",
    "clamped_max_tokens",
    "dropped_warning",
    "ignored_warning",
    "is_native_openai",
    "merge_params",
    "openai_plan",
    "responses_plan",
]

SAMPLING = ("temperature", "top_p", "top_k")


@dataclass(frozen=True, slots=True)
class ParamPlan:
    """Where each configured parameter goes for one provider and model.

    `kwargs` are the fields the SDK's typed create call has keywords for and `extra_body` those
    it has none for; the adapters send both as top-level request fields (`wire_fields()`).
    `dropped` names (camelCase, as in the spec) the parameters the target does not take;
    `adjusted` says which were changed to fit it (a clamped maxTokens, stop cut to 4).
    """

    kwargs: dict[str, Any] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    adjusted: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    """Parameters (camelCase) the target ignores by design (OpenAI's topK): not sent, warned
    about, and never refused, not even in a call's own `params`."""
    refused: tuple[str, ...] = ()
    """Values the target does not take, each a sentence naming the value (`effort 'max' is not
    taken by …`); the parameter is not sent."""
    tool_field: str = "tool_choice"
    """The wire field of the tool choice (Gemini's is `toolConfig`)."""

    def wire_fields(self, *, with_tools: bool = True) -> dict[str, Any]:
        """Every field this plan adds to the request body, as it appears on the wire.

        `tool_choice` goes only with tools: both APIs refuse it on a request that has none.
        """
        fields = {**self.kwargs, **self.extra_body}
        if not with_tools:
            fields.pop(self.tool_field, None)
        return fields


class ParamsNotTaken(ValueError):
    """Per-call parameters the provider does not take; the message names them and the provider."""


def merge_params(defaults: RequestParams, call: RequestParams | None) -> RequestParams:
    """The parameters of one call: the call's own over the agent's (`null` clears a default).

    Args:
        defaults: The agent's `requestParams`.
        call: The `params` of the `send_message` call, or None.

    Returns:
        `defaults` with every field the call set replaced by the call's value; `extra` merged
        key by key.
    """
    if call is None or not call.model_fields_set:
        return defaults
    update = {name: getattr(call, name) for name in call.model_fields_set}
    if "extra" in update:
        # Key by key: a call changes only the provider fields it names (a null value removes
        # one), so the agent's own fields (`store: false`, a `metadata` tag) stay in force.
        merged = {**(defaults.extra or {}), **(call.extra or {})}
        update["extra"] = {k: v for k, v in merged.items() if v is not None} or None
    return defaults.model_copy(update=update)


def clamped_max_tokens(
    params: RequestParams, capabilities: ModelCapabilities, adjusted: list[str]
) -> int | None:
    """`maxTokens` cut to the model's `maxOutputTokens` (saying so in `adjusted`); None if unset."""
    if params.max_tokens is None or params.max_tokens <= capabilities.max_output_tokens:
        return params.max_tokens
    adjusted.append(
        f"maxTokens {params.max_tokens} is above the model's maxOutputTokens; "
        f"sending {capabilities.max_output_tokens}"
    )
    return capabilities.max_output_tokens


def _openai_response_format(value: ResponseFormat) -> dict[str, Any]:
    if value.json_schema is None:
        return {"type": value.type}
    schema: dict[str, Any] = {"name": value.json_schema.name, "schema": value.json_schema.schema_}
    if value.json_schema.description is not None:
        schema["description"] = value.json_schema.description
    if value.json_schema.strict is not None:
        schema["strict"] = value.json_schema.strict
    return {"type": "json_schema", "json_schema": schema}


OPENAI_MAX_STOP = 4
"""OpenAI's API refuses more stop sequences than this."""
OPENAI_PASSED_AS_IS = (
    ("seed", "seed"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("effort", "reasoning_effort"),
)
"""Parameters every Chat Completions server takes as they are: (RequestParams field, wire name)."""


def openai_plan(
    params: RequestParams, *, native: bool, capabilities: ModelCapabilities, subject: str = "this provider"
) -> ParamPlan:
    """Map request parameters onto a Chat Completions request.

    Args:
        params: The request parameters.
        native: Whether the server is api.openai.com (see `is_native_openai`).
        capabilities: The model's declared limits (`max_output_tokens` caps `max_tokens`).
        subject: How messages name the provider.

    Returns:
        The plan: SDK keywords, extra body fields, dropped and adjusted parameters.
    """
    kwargs = _openai_sampling(params)
    extra = _top_k(params, native=native)
    dropped: list[str] = []
    adjusted: list[str] = []
    max_tokens = clamped_max_tokens(params, capabilities, adjusted)
    if max_tokens is not None:
        kwargs["max_completion_tokens" if native else "max_tokens"] = max_tokens
    if params.stop:
        stop = list(params.stop)
        if native and len(stop) > OPENAI_MAX_STOP:
            adjusted.append(
                f"stop has {len(stop)} sequences; OpenAI takes {OPENAI_MAX_STOP}, the first are sent"
            )
            stop = stop[:OPENAI_MAX_STOP]
        kwargs["stop"] = stop
    refused: list[str] = []
    for name, wire in OPENAI_PASSED_AS_IS:
        if (value := getattr(params, name)) is not None:
            kwargs[wire] = value
    if params.effort is not None and params.effort not in (taken := openai_efforts(native=native)):
        kwargs.pop("reasoning_effort")
        refused.append(f"effort {params.effort!r}: {subject} takes {', '.join(taken)}")
    if params.response_format is not None:
        kwargs["response_format"] = _openai_response_format(params.response_format)
    if params.tool_choice is not None:
        choice = params.tool_choice
        named = choice not in ("auto", "none", "required")
        kwargs["tool_choice"] = {"type": "function", "function": {"name": choice}} if named else choice
    extra.update(params.extra or {})
    return ParamPlan(
        kwargs=kwargs,
        extra_body=extra,
        dropped=tuple(dropped),
        adjusted=tuple(adjusted),
        ignored=_openai_ignored(params, native=native),
        refused=tuple(refused),
    )


def _openai_sampling(params: RequestParams) -> dict[str, Any]:
    """`temperature` and `top_p` as both OpenAI APIs name them, those that are set."""
    fields = {"temperature": params.temperature, "top_p": params.top_p}
    return {name: value for name, value in fields.items() if value is not None}


def _top_k(params: RequestParams, *, native: bool) -> dict[str, Any]:
    """`top_k` as the top-level field every OpenAI-shaped server but OpenAI's own takes."""
    return {"top_k": params.top_k} if params.top_k is not None and not native else {}


def _openai_ignored(params: RequestParams, *, native: bool) -> tuple[str, ...]:
    """What OpenAI itself ignores (the seed: "top_k: Anthropic-only; OpenAI ignores")."""
    return ("topK",) if params.top_k is not None and native else ()


RESPONSES_NOT_TAKEN = (
    ("stop", "stop"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
)
"""Parameters the Responses API has no field for: (RequestParams field, camelCase name)."""


def _responses_format(value: ResponseFormat) -> dict[str, Any]:
    if value.json_schema is None:
        return {"type": value.type}
    schema: dict[str, Any] = {
        "type": "json_schema",
        "name": value.json_schema.name,
        "schema": value.json_schema.schema_,
    }
    if value.json_schema.description is not None:
        schema["description"] = value.json_schema.description
    if value.json_schema.strict is not None:
        schema["strict"] = value.json_schema.strict
    return schema


def responses_plan(
    params: RequestParams, *, native: bool, capabilities: ModelCapabilities, subject: str = "this provider"
) -> ParamPlan:
    """Map request parameters onto a Responses API request.

    `maxTokens` is `max_output_tokens`, `effort` is `reasoning.effort`, `responseFormat` is
    `text.format` (a flat `{type: json_schema, name, schema}`), a named tool choice is
    `{"type": "function", "name"}`; `stop`, `seed` and the penalties have no field. `topK` is
    a top-level `top_k` for every server but OpenAI's own, which ignores it.

    Args:
        params: The request parameters.
        native: Whether the server is api.openai.com (it decides the effort values taken).
        capabilities: The model's declared limits (`max_output_tokens` caps `max_tokens`).
        subject: How messages name the provider.

    Returns:
        The plan: wire fields, dropped, adjusted and refused parameters.
    """
    kwargs = _openai_sampling(params)
    dropped = [camel for name, camel in RESPONSES_NOT_TAKEN if getattr(params, name) not in (None, [])]
    adjusted: list[str] = []
    refused: list[str] = []
    if (max_tokens := clamped_max_tokens(params, capabilities, adjusted)) is not None:
        kwargs["max_output_tokens"] = max_tokens
    if params.effort is not None:
        if params.effort in (taken := openai_efforts(native=native)):
            kwargs["reasoning"] = {"effort": params.effort}
        else:
            refused.append(f"effort {params.effort!r}: {subject} takes {', '.join(taken)}")
    if params.response_format is not None:
        kwargs["text"] = {"format": _responses_format(params.response_format)}
    if params.tool_choice is not None:
        choice = params.tool_choice
        named = choice not in ("auto", "none", "required")
        kwargs["tool_choice"] = {"type": "function", "name": choice} if named else choice
    return ParamPlan(
        kwargs=kwargs,
        extra_body={**_top_k(params, native=native), **(params.extra or {})},
        dropped=tuple(dropped),
        adjusted=tuple(adjusted),
        ignored=_openai_ignored(params, native=native),
        refused=tuple(refused),
    )


ANTHROPIC_TOOL_CHOICE = {"auto": "auto", "none": "none", "required": "any"}


def anthropic_plan(
    params: RequestParams, *, model: str, capabilities: ModelCapabilities, subject: str = "this provider"
) -> ParamPlan:
    """Map request parameters onto a Messages API request for `model`.

    Args:
        params: The request parameters.
        model: The Claude model id; its rule decides sampling and effort support.
        capabilities: The model's declared limits; `max_output_tokens` is the default and the
            largest `max_tokens`.
        subject: How messages name the provider and model.

    Returns:
        The plan: SDK keywords (always with `max_tokens`), extra body fields, dropped and
        adjusted parameters.
    """
    rule = anthropic_rule(model)
    adjusted: list[str] = []
    kwargs: dict[str, Any] = {
        "max_tokens": clamped_max_tokens(params, capabilities, adjusted) or capabilities.max_output_tokens
    }
    extra: dict[str, Any] = {}
    dropped: list[str] = []
    for name in SAMPLING:
        value = getattr(params, name)
        if value is None:
            continue
        if rule.sampling:
            extra[name] = value
        else:
            dropped.append(to_camel(name))
    if params.stop:
        kwargs["stop_sequences"] = list(params.stop)
    for name in ("seed", "presence_penalty", "frequency_penalty"):
        if getattr(params, name) is not None:
            dropped.append(to_camel(name))
    if params.response_format is not None and params.response_format.type != "text":
        dropped.append("responseFormat")
    refused: list[str] = []
    if params.effort is not None:
        if params.effort in rule.efforts:
            kwargs["output_config"] = {"effort": params.effort}
        elif rule.effort:
            refused.append(f"effort {params.effort!r}: {subject} takes {', '.join(rule.efforts)}")
        else:
            dropped.append("effort")
    if params.tool_choice is not None:
        choice = params.tool_choice
        kind = ANTHROPIC_TOOL_CHOICE.get(choice)
        kwargs["tool_choice"] = {"type": kind} if kind else {"type": "tool", "name": choice}
    extra.update(params.extra or {})
    return ParamPlan(
        kwargs=kwargs,
        extra_body=extra,
        dropped=tuple(dropped),
        adjusted=tuple(adjusted),
        refused=tuple(refused),
    )


def dropped_warning(plan: ParamPlan, provider: str) -> str | None:
    """The one warning an adapter logs about `plan`, or None when nothing was dropped or changed.

    Args:
        plan: The plan computed for the provider and model.
        provider: How the provider is named in logs, e.g. `anthropic provider 'claude' (claude-opus-4-7)`.

    Returns:
        A sentence naming the dropped parameters and the provider, and any adjustments; or None.
    """
    parts = []
    if plan.dropped:
        names = ", ".join(plan.dropped)
        parts.append(
            f"{provider} does not take {names}; dropping {'it' if len(plan.dropped) == 1 else 'them'}"
        )
    if plan.ignored:
        parts.append(ignored_warning(plan, provider))
    parts.extend(f"{provider}: {change}" for change in plan.adjusted)
    parts.extend(f"not sending {refusal}" for refusal in plan.refused)
    return "; ".join(parts) or None


def ignored_warning(plan: ParamPlan, provider: str) -> str:
    """The sentence naming the parameters `provider` ignores (empty when there are none)."""
    if not plan.ignored:
        return ""
    names = ", ".join(plan.ignored)
    return f"{provider} ignores {names}; not sending {'it' if len(plan.ignored) == 1 else 'them'}"


def check_call_params(plan: ParamPlan, provider: str) -> None:
    """Refuse per-call parameters the provider does not take (the agent's own are dropped instead).

    Those it ignores by design (`ParamPlan.ignored`) are not refused; the caller warns about them.

    Args:
        plan: The plan of the call's own parameters.
        provider: How the provider is named, as in `dropped_warning`.

    Raises:
        ParamsNotTaken: A parameter is not taken; the message names each and the provider.
    """
    if plan.dropped:
        names = ", ".join(f"params.{name}" for name in plan.dropped)
        raise ParamsNotTaken(
            f"{names}: {provider} does not take {'it' if len(plan.dropped) == 1 else 'them'}"
        )
    if plan.refused:
        raise ParamsNotTaken("; ".join(f"params.{refusal}" for refusal in plan.refused))
