"""The Gemini API's own wire format (`generateContent`): requests, built by pure functions.

Requests: `systemInstruction`, `contents` with roles `user` and `model` (tool results go back
as `functionResponse` parts of a user turn), `tools[].functionDeclarations`, `toolConfig` and
`generationConfig`. Responses are read in `gemini_response`.

Gemini 3 signs its reasoning: a `thoughtSignature` comes on the part of a function call (and
may on a text part). It is kept on the ToolCall (or the answer's text) and sent back verbatim on
the same part of the next request: Gemini 3 refuses a conversation whose function calls lost
their signatures (HTTP 400), so multi-step tool use depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_api.model_rules import gemini_efforts
from pallas_runtime.llm.adapter import alternating_turns
from pallas_runtime.llm.params import ParamPlan, clamped_max_tokens
from pallas_runtime.messages import (
    AssistantMessage,
    ContentPart,
    Message,
    TextPart,
    ToolResultsMessage,
    ToolSpec,
)

TOOL_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
"""`toolChoice` values as `functionCallingConfig.mode`; a tool's name is `ANY` limited to it."""


GENERATED_ID = "gemini-call-"
"""The prefix of call ids made here for function calls Gemini sent without one (it matches a
response to its call by name and order then); such ids are not sent back."""


def _parts(content: Sequence[ContentPart]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:  # the API refuses a part with empty text
                parts.append({"text": part.text})
        else:
            parts.append({"inlineData": {"mimeType": part.mime_type, "data": part.data}})
    return parts


def _signed(part: dict[str, Any], signature: str | None) -> dict[str, Any]:
    return {**part, "thoughtSignature": signature} if signature else part


def _model_parts(message: AssistantMessage) -> list[dict[str, Any]]:
    parts = [_signed({"text": message.text}, message.signature)] if message.text else []
    for call in message.tool_calls:
        function: dict[str, Any] = {"name": call.name, "args": call.arguments}
        if not call.id.startswith(GENERATED_ID):
            function["id"] = call.id
        parts.append(_signed({"functionCall": function}, call.signature))
    return parts


def _response_parts(message: ToolResultsMessage) -> list[dict[str, Any]]:
    """One `functionResponse` per result; a result's images follow it as parts of their own."""
    parts: list[dict[str, Any]] = []
    for result in message.results:
        text = "".join(p.text for p in result.content if isinstance(p, TextPart))
        function: dict[str, Any] = {
            "name": result.name,
            "response": {"error": text} if result.is_error else {"result": text},
        }
        if not result.call_id.startswith(GENERATED_ID):
            function["id"] = result.call_id
        parts.append({"functionResponse": function})
        parts.extend(_parts([p for p in result.content if not isinstance(p, TextPart)]))
    return parts


def gemini_contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A conversation as Gemini `contents`: user and model turns, merged where a role repeats.

    Tool results are a user turn of `functionResponse` parts; an assistant message carrying
    nothing is left out, and so is a TurnFailure (the conversation's record, never sent).
    """
    return alternating_turns(
        messages,
        user=_parts,
        assistant=_model_parts,
        results=_response_parts,
        assistant_role="model",
        parts="parts",
    )


def gemini_request(system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The fields of a generateContent request besides the model and the generation settings."""
    body: dict[str, Any] = {"contents": gemini_contents(messages)}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.input_schema}
            for t in tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    return body


def gemini_plan(
    params: RequestParams, *, model: str, capabilities: ModelCapabilities, subject: str
) -> ParamPlan:
    """Map request parameters onto `generationConfig` (and `toolConfig`) for a Gemini model.

    Everything but presence and frequency penalties on Gemini 3 has a field; `effort` is
    Gemini 3's `thinkingLevel` (older models think by a token budget no effort names: dropped).
    """
    adjusted: list[str] = []
    config: dict[str, Any] = {}
    names = {
        "temperature": "temperature",
        "top_p": "topP",
        "top_k": "topK",
        "seed": "seed",
        "presence_penalty": "presencePenalty",
        "frequency_penalty": "frequencyPenalty",
    }
    for field, wire in names.items():
        if (value := getattr(params, field)) is not None:
            config[wire] = value
    if (limit := clamped_max_tokens(params, capabilities, adjusted)) is not None:
        config["maxOutputTokens"] = limit
    if params.stop:
        config["stopSequences"] = list(params.stop)
    dropped: list[str] = []
    refused: list[str] = []
    if params.effort is not None:
        efforts = gemini_efforts(model)
        if params.effort in efforts:
            config["thinkingConfig"] = {"thinkingLevel": params.effort}
        elif efforts:
            refused.append(f"effort {params.effort!r}: {subject} takes {', '.join(efforts)}")
        else:
            dropped.append("effort")
    form = params.response_format
    if form is not None and form.type != "text":
        config["responseMimeType"] = "application/json"
        if form.json_schema is not None:
            config["responseJsonSchema"] = form.json_schema.schema_
    kwargs: dict[str, Any] = {"generationConfig": config} if config else {}
    if params.tool_choice is not None:
        mode = TOOL_MODES.get(params.tool_choice)
        calling: dict[str, Any] = {"mode": mode or "ANY"}
        if mode is None:
            calling["allowedFunctionNames"] = [params.tool_choice]
        kwargs["toolConfig"] = {"functionCallingConfig": calling}
    return ParamPlan(
        kwargs=kwargs,
        extra_body=dict(params.extra or {}),
        dropped=tuple(dropped),
        adjusted=tuple(adjusted),
        refused=tuple(refused),
        tool_field="toolConfig",
    )
