"""OpenAI Responses API adapter (`provider.api: responses`) on the official `openai` SDK.

The Responses API is OpenAI's reasoning models' own: `POST {base}/responses` with the system
prompt as `instructions` and the conversation as `input` items (messages, `function_call`s and
their `function_call_output`s), answered by a `response` whose `output` holds the same kinds of
items. Requests are stateless (`store: false`, the conversation sent whole each time), as with
Chat Completions, so a conversation moves between providers and pods unchanged.

The translation functions are pure (`responses_input`, `responses_tools`,
`completion_from_response`); the provider is the Chat Completions one with these hooks, so
client, retries, errors, key handling and preflight (`GET {base}/models`) are shared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pallas_runtime.llm.adapter import SdkProvider, parse_arguments, translated, wire_count
from pallas_runtime.llm.openai_chat import OpenAIChatProvider, text_only_results
from pallas_runtime.llm.params import responses_plan
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    ContentPart,
    Message,
    TextPart,
    ToolCall,
    ToolResultsMessage,
    ToolSpec,
    Usage,
)


def _input_content(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    return [
        {"type": "input_text", "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "input_image", "image_url": f"data:{part.mime_type};base64,{part.data}"}
        for part in parts
        if not isinstance(part, TextPart) or part.text
    ]


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.text:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message.text}],
            }
        )
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments),
        }
        for call in message.tool_calls
    )
    return items


def _tool_output_items(message: ToolResultsMessage) -> list[dict[str, Any]]:
    """Function outputs are text here; images follow in one user message, as in Chat Completions."""
    return text_only_results(
        message,
        output=lambda result, text: {
            "type": "function_call_output",
            "call_id": result.call_id,
            "output": text,
        },
        user_content=_input_content,
    )


def responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate a conversation into Responses API `input` items (a TurnFailure is never sent)."""
    return translated(
        messages,
        user=lambda m: [{"role": "user", "content": _input_content(m.content)}],
        assistant=_assistant_items,
        results=_tool_output_items,
    )


def responses_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The wire `tools`: function tools, flat (`name` beside `type`, not under `function`)."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        }
        for tool in tools
    ]


def usage_from_responses(usage: object) -> Usage:
    """Map Responses usage onto token kinds, as Chat Completions usage (`usage_from_chat`).

    `input_tokens` includes `input_tokens_details.cached_tokens`; `output_tokens` includes
    `output_tokens_details.reasoning_tokens`. Missing or null counts are 0.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    input_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    cached = wire_count(input_details.get("cached_tokens")) if isinstance(input_details, Mapping) else 0
    reasoning = (
        wire_count(output_details.get("reasoning_tokens")) if isinstance(output_details, Mapping) else 0
    )
    return Usage(
        input=max(wire_count(usage.get("input_tokens")) - cached, 0),
        output=wire_count(usage.get("output_tokens")),
        cache_read=cached,
        reasoning=reasoning,
    )


def completion_from_response(body: Mapping[str, Any]) -> Completion:
    """Translate a `response` object into a Completion.

    The text is every `output_text` part of the `message` items; each `function_call` item is a
    tool call (malformed `arguments` give `arguments={}` and `arguments_error`). Reasoning items
    are not part of the neutral conversation and are skipped. The stop reason is `tool_calls`
    with calls, the `incomplete_details.reason` of an incomplete response, else `stop`.

    Raises:
        ValueError: The body has no `output` list, or its status is `failed`.
    """
    if body.get("status") == "failed":
        error = body.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        raise ValueError(f"the response failed: {message or 'no reason given'}")
    output = body.get("output")
    if not isinstance(output, list):
        raise ValueError("the response has no output list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, item in enumerate(output):
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            texts.extend(
                part["text"]
                for part in item.get("content") or ()
                if isinstance(part, Mapping)
                and part.get("type") == "output_text"
                and isinstance(part.get("text"), str)
            )
        elif item.get("type") == "function_call":
            arguments, error = parse_arguments(item.get("arguments"))
            calls.append(
                ToolCall(
                    id=str(item.get("call_id") or item.get("id") or f"call_{index}"),
                    name=str(item.get("name") or ""),
                    arguments=arguments,
                    arguments_error=error,
                )
            )
    incomplete = body.get("incomplete_details")
    reason = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
    stop = "tool_calls" if calls else str(reason) if reason else "stop"
    return Completion(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=usage_from_responses(body.get("usage")),
        stop_reason=stop,
    )


class ResponsesStreamReader:
    """A Responses stream folded into the response it ends with.

    Text comes from `response.output_text.delta` events; the body is the `response` of the final
    `response.completed` (or `response.incomplete`) event, which carries every output item.
    """

    def __init__(self) -> None:
        self._final: dict[str, Any] | None = None

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; the text it adds."""
        kind = event.get("type")
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            return delta if isinstance(delta, str) else ""
        if kind in ("response.completed", "response.incomplete") and isinstance(
            event.get("response"), Mapping
        ):
            self._final = dict(event["response"])
        return ""

    def body(self) -> dict[str, Any]:
        """The final response; ValueError (unusable) when the stream ended without one."""
        if self._final is None:
            raise ValueError("the stream ended before response.completed")
        return self._final


class OpenAIResponsesProvider(OpenAIChatProvider):
    """One model behind OpenAI's Responses API (`provider.api: responses`)."""

    parse_body = staticmethod(completion_from_response)
    stream_reader = staticmethod(ResponsesStreamReader)
    completion_path = "/responses"
    stream_fields = SdkProvider.stream_fields  # usage comes in the last event without asking
    plan = staticmethod(responses_plan)

    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        # store: false keeps the provider from holding the conversation: Pallas keeps it.
        body: dict[str, Any] = {"input": responses_input(messages), "store": False}
        if system:
            body["instructions"] = system
        if wire_tools := responses_tools(tools):
            body["tools"] = wire_tools
        return body
