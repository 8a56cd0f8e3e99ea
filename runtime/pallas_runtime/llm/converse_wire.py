"""Amazon Bedrock's Converse API on the wire: request bodies, answers and stream events (pure).

One request shape serves every Bedrock model family (Anthropic, Llama, Mistral, Nova, …):
`system` is a list of text blocks, each message's `content` a list of `text`, `image`,
`toolUse` and `toolResult` blocks, tools go in `toolConfig`, sampling in `inferenceConfig`
(`maxTokens`, `temperature`, `topP`, `stopSequences`); what the model family takes beyond those
(`top_k`, …) goes in `additionalModelRequestFields`. The answer is `output.message` with the
same blocks, a `stopReason` and `usage` (`inputTokens`, `outputTokens`, `cacheReadInputTokens`,
`cacheWriteInputTokens`). A stream (`converse-stream`) sends `messageStart`,
`contentBlockStart`/`Delta`/`Stop`, `messageStop` and `metadata` events, each an event-stream
frame whose `:event-type` header names it and whose payload is the event's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime import messages as neutral
from pallas_runtime.llm.adapter import alternating_turns, parse_arguments, usage_counts, wire_count
from pallas_runtime.llm.params import ParamPlan, clamped_max_tokens
from pallas_runtime.messages import Completion, ContentPart, Message, ToolCall, ToolSpec, Usage

IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}
"""The image formats Converse takes, by MIME type."""

TOOL_CHOICES: dict[str, dict[str, Any]] = {"auto": {"auto": {}}, "required": {"any": {}}, "any": {"any": {}}}
"""`toolChoice` for Pallas's named choices; any other name is a tool (`{"tool": {"name": …}}`)."""


def _content(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, neutral.TextPart):
            if part.text:  # Converse refuses empty text blocks, as the Messages API does
                blocks.append({"text": part.text})
            continue
        kind = IMAGE_FORMATS.get(part.mime_type)
        if kind is None:
            raise ValueError(f"Bedrock Converse takes png, jpeg, gif and webp images, not {part.mime_type}")
        # The JSON protocol carries a blob as base64: the data is sent as it is held.
        blocks.append({"image": {"format": kind, "source": {"bytes": part.data}}})
    return blocks


def _assistant(message: neutral.AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
    blocks.extend(
        {"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments}}
        for call in message.tool_calls
    )
    return blocks


def _tool_results(message: neutral.ToolResultsMessage) -> list[dict[str, Any]]:
    return [
        {
            "toolResult": {
                "toolUseId": result.call_id,
                # A result without content is refused; an empty text says "nothing came back".
                "content": _content(result.content) or [{"text": "(no output)"}],
                "status": "error" if result.is_error else "success",
            }
        }
        for result in message.results
    ]


def converse_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A conversation as Converse `messages` (`alternating_turns`).

    Tool results are a user message of `toolResult` blocks.

    Raises:
        ValueError: An image of a format Converse does not take.
    """
    return alternating_turns(
        messages,
        user=_content,
        assistant=_assistant,
        results=_tool_results,
        assistant_role="assistant",
        parts="content",
    )


def converse_plan(params: RequestParams, capabilities: ModelCapabilities) -> ParamPlan:
    """Where each request parameter goes in a Converse request.

    `inferenceConfig` holds what every family takes; `topK` and `extra` go to the model as
    `additionalModelRequestFields` (Anthropic's and Mistral's models take `top_k`); seed,
    penalties, effort and a JSON response format have no Converse field and are dropped.
    """
    adjusted: list[str] = []
    inference: dict[str, Any] = {
        "maxTokens": clamped_max_tokens(params, capabilities, adjusted) or capabilities.max_output_tokens
    }
    if params.temperature is not None:
        inference["temperature"] = params.temperature
    if params.top_p is not None:
        inference["topP"] = params.top_p
    if params.stop:
        inference["stopSequences"] = list(params.stop)
    additional: dict[str, Any] = dict(params.extra or {})
    if params.top_k is not None:
        additional["top_k"] = params.top_k
    kwargs: dict[str, Any] = {"inferenceConfig": inference}
    if additional:
        kwargs["additionalModelRequestFields"] = additional
    if params.tool_choice is not None:
        choice = TOOL_CHOICES.get(params.tool_choice, {"tool": {"name": params.tool_choice}})
        kwargs["tool_choice"] = choice  # sent only with tools, in `toolConfig` (ConverseClient)
    dropped = [
        camel
        for name, camel in (
            ("seed", "seed"),
            ("presence_penalty", "presencePenalty"),
            ("frequency_penalty", "frequencyPenalty"),
            ("effort", "effort"),
        )
        if getattr(params, name) is not None
    ]
    if params.response_format is not None and params.response_format.type != "text":
        dropped.append("responseFormat")
    return ParamPlan(kwargs=kwargs, dropped=tuple(dropped), adjusted=tuple(adjusted))


def converse_request(system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """A Converse request's conversation and tools; the plan's fields are added beside them.

    Raises:
        ValueError: An image of a format Converse does not take.
    """
    body: dict[str, Any] = {"messages": converse_messages(messages)}
    if system:
        body["system"] = [{"text": system}]
    if tools:
        body["toolConfig"] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": tool.name,
                        "description": tool.description or tool.name,
                        "inputSchema": {"json": tool.input_schema},
                    }
                }
                for tool in tools
            ]
        }
    return body


def converse_usage(usage: object) -> Usage:
    """Converse's token counts; cached prompt tokens are counted apart from `inputTokens`."""
    return usage_counts(usage, "inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")


def converse_completion(body: Mapping[str, Any]) -> Completion:
    """A Converse answer as a Completion.

    `stopReason` is kept as Bedrock names it (`end_turn`, `tool_use`, `max_tokens`,
    `stop_sequence`, `guardrail_intervened`, `content_filtered`): the Messages API's names for
    the same stops, which the loop already reads.

    Raises:
        ValueError: The body has no `output.message.content` list.
    """
    output = body.get("output")
    message = output.get("message") if isinstance(output, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        raise ValueError("the response has no output.message.content list")
    blocks = [block for block in content if isinstance(block, Mapping)]
    text = "".join(block["text"] for block in blocks if isinstance(block.get("text"), str))
    uses = [block["toolUse"] for block in blocks if isinstance(block.get("toolUse"), Mapping)]
    stop = body.get("stopReason")
    usage = converse_usage(body.get("usage"))
    calls = tuple(_tool_call(use, index) for index, use in enumerate(uses))
    return Completion(text, calls, usage, None if stop is None else str(stop))


def _tool_call(use: Mapping[str, Any], index: int) -> ToolCall:
    """A `toolUse` block as a ToolCall; an `input` that is not an object is the call's error."""
    arguments, error = parse_arguments(use.get("input"))
    return ToolCall(
        str(use.get("toolUseId") or f"tooluse_{index}"), str(use.get("name") or ""), arguments, error
    )


class ConverseStreamReader:
    """Folds `converse-stream` events into the body `converse` answers.

    Each event is `{kind: payload}`, the kind the frame's `:event-type` (the shape the AWS SDKs
    hand stream events out in).
    """

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, str] = {}
        self._stop: str | None = None
        self._usage: dict[str, Any] = {}

    def feed(self, wrapped: Mapping[str, Any]) -> str:
        """Take one event; the text it adds to the answer ('' if none)."""
        [(kind, event)] = wrapped.items()
        if not isinstance(event, Mapping):
            return ""
        index = wire_count(event.get("contentBlockIndex"))
        if kind == "contentBlockStart":
            start = event.get("start")
            if isinstance(start, Mapping) and isinstance(use := start.get("toolUse"), Mapping):
                self._blocks[index] = {
                    "toolUse": {"toolUseId": use.get("toolUseId"), "name": use.get("name")}
                }
                self._inputs[index] = ""
        elif kind == "contentBlockDelta" and isinstance(delta := event.get("delta"), Mapping):
            if isinstance(text := delta.get("text"), str):
                block = self._blocks.setdefault(index, {"text": ""})
                block["text"] = block.get("text", "") + text
                return text
            if isinstance(use := delta.get("toolUse"), Mapping) and isinstance(use.get("input"), str):
                self._inputs[index] = self._inputs.get(index, "") + use["input"]
        elif kind == "messageStop":
            self._stop = event.get("stopReason")
        elif kind == "metadata" and isinstance(event.get("usage"), Mapping):
            self._usage = dict(event["usage"])
        return ""

    def body(self) -> dict[str, Any]:
        """The non-streamed answer these events add up to (tool inputs parsed from their JSON).

        Raises:
            ValueError: A tool's streamed input is not JSON.
        """
        content = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if "toolUse" in block:
                raw = self._inputs.get(index) or "{}"
                try:
                    block["toolUse"]["input"] = json.loads(raw)
                except ValueError:
                    raise ValueError(f"a tool call's streamed input is not JSON: {raw[:200]!r}") from None
            content.append(block)
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop,
            "usage": self._usage,
        }
