"""Chat Completions adapter (OpenAI, vLLM, llama.cpp, LiteLLM, Ollama…) on the official `openai` SDK.

The translation functions are pure: `chat_messages` and `chat_tools` build the wire JSON of a
request, `completion_from_chat` reads the wire JSON of a response. The provider sends them with
`AsyncOpenAI`, whose own retries (`max_retries`, backoff honouring `retry-after`) and timeout
apply. Responses are read as JSON rather than as SDK models because OpenAI-compatible servers
differ in what they omit, and this module decides how to read each gap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import openai

from pallas_api.fields import RequestParams
from pallas_io.llm_check import PUBLIC_APIS
from pallas_runtime.llm.adapter import SdkProvider, StreamReader, parse_arguments, translated, wire_count
from pallas_runtime.llm.errors import SdkErrors
from pallas_runtime.llm.openai_sse import OpenAIEvents
from pallas_runtime.llm.params import ParamPlan, is_native_openai, openai_plan
from pallas_runtime.messages import (
    AssistantMessage,
    Completion,
    ContentPart,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    ToolSpec,
    Usage,
)

log = logging.getLogger("pallas.llm")

DEFAULT_BASE_URL = PUBLIC_APIS["openai"]
"""The SDK's default, passed explicitly so an ambient OPENAI_BASE_URL cannot redirect the agent."""


def _image_part(image: ImagePart) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"}}


def _user_content(parts: Sequence[ContentPart]) -> str | list[dict[str, Any]]:
    # A lone text part goes as a plain string: every OpenAI-compatible server's chat template
    # takes that, while some older ones mishandle a list of parts.
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return _user_parts(parts)


def _user_parts(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": part.text} if isinstance(part, TextPart) else _image_part(part)
        for part in parts
    ]


def _assistant_message(message: AssistantMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    elif not message.text:
        wire["content"] = ""
    return wire


def text_only_result(result: ToolResult) -> tuple[str, list[ImagePart], str]:
    """A tool result for an API whose tool results are text only (both OpenAI APIs).

    Returns:
        The text the model reads (an error marked, images announced), the images, and the
        line that introduces them in the user message that carries them after the results.
    """
    text = "\n".join(part.text for part in result.content if isinstance(part, TextPart))
    images = [part for part in result.content if isinstance(part, ImagePart)]
    if result.is_error:
        # The wire has no error flag for tool results; the model must read it from the text.
        text = f"Error: {text}" if text else "Error"
    if images:
        note = f"[{len(images)} image(s) attached in the next message]"
        text = f"{text}\n{note}" if text else note
    return text, images, f"Images returned by tool {result.name} (call {result.call_id}):"


def text_only_results(
    message: ToolResultsMessage,
    *,
    output: Callable[[ToolResult, str], dict[str, Any]],
    user_content: Callable[[Sequence[ContentPart]], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Tool results for an API whose tool outputs are text only (both OpenAI APIs).

    Each result is its `output` item (the text of `text_only_result`); the images of them all
    follow in one user message, each result's introduced by its heading.
    """
    items: list[dict[str, Any]] = []
    shown: list[ContentPart] = []
    for result in message.results:
        text, images, heading = text_only_result(result)
        if images:
            shown += [TextPart(text=heading), *images]
        items.append(output(result, text))
    if shown:
        items.append({"role": "user", "content": user_content(shown)})
    return items


def _tool_results(message: ToolResultsMessage) -> list[dict[str, Any]]:
    """Tool messages are text-only in Chat Completions, so images follow in one user message."""
    return text_only_results(
        message,
        output=lambda result, text: {"role": "tool", "tool_call_id": result.call_id, "content": text},
        user_content=_user_parts,
    )


def chat_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate a conversation into Chat Completions `messages`.

    Args:
        system: The system prompt; sent as the first `system` message unless empty.
        messages: The conversation in provider-neutral types.

    Returns:
        The wire `messages` list.
    """
    said = translated(
        messages,
        user=lambda m: [{"role": "user", "content": _user_content(m.content)}],
        assistant=lambda m: [_assistant_message(m)],
        results=_tool_results,
    )
    return [{"role": "system", "content": system}, *said] if system else said


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The wire `tools` of a Chat Completions request: function tools (empty when none are offered)."""
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
        }
        for tool in tools
    ]


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some servers answer with a list of content parts; only text parts carry the reply.
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def usage_from_chat(usage: object) -> Usage:
    """Map Chat Completions usage onto token kinds.

    `prompt_tokens` includes cached prompt tokens, so `input` is `prompt_tokens - cached_tokens`
    and `cache_read` is `cached_tokens`; `output` is `completion_tokens` (reasoning included,
    as billed) and `reasoning` is `completion_tokens_details.reasoning_tokens`. Chat Completions
    reports no cache writes. vLLM and llama.cpp omit the details objects or send null: missing
    counts are 0. A server that reports its cache hits as `prompt_cache_hit_tokens` instead
    (DeepSeek) has them counted as `cache_hit`, out of `input` too; a token is one kind only, so
    they count only when `cached_tokens` does not already report them.
    """
    if not isinstance(usage, Mapping):
        return Usage()
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = wire_count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, Mapping) else 0
    reasoning = (
        wire_count(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, Mapping)
        else 0
    )
    hit = 0 if cached else wire_count(usage.get("prompt_cache_hit_tokens"))
    return Usage(
        input=max(wire_count(usage.get("prompt_tokens")) - cached - hit, 0),
        output=wire_count(usage.get("completion_tokens")),
        cache_read=cached,
        reasoning=reasoning,
        cache_hit=hit,
    )


def completion_from_chat(body: Mapping[str, Any]) -> Completion:
    """Translate a Chat Completions response body into a Completion (first choice only).

    Malformed tool-call arguments do not raise: the call gets `arguments={}` and
    `arguments_error`, so the loop can tell the model what went wrong.

    Raises:
        ValueError: The body has no choice with a message.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ValueError("the response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise ValueError("the first choice has no message")
    calls: list[ToolCall] = []
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments, error = parse_arguments(function.get("arguments"))
        calls.append(
            ToolCall(
                # llama.cpp used to omit ids; the loop needs one to pair the result with the call.
                id=str(call.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                arguments=arguments,
                arguments_error=error,
            )
        )
    finish_reason = choices[0].get("finish_reason")
    return Completion(
        text=_text_of(message.get("content")),
        tool_calls=tuple(calls),
        usage=usage_from_chat(body.get("usage")),
        stop_reason=str(finish_reason) if finish_reason is not None else None,
    )


class ChatStreamReader:
    """A Chat Completions stream (`chat.completion.chunk` events) folded into a response body.

    Text and each tool call's argument fragments are concatenated, tool calls keyed by their
    `index`; the usage is the last chunk's that has one (`stream_options.include_usage`).
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: object = None
        self._usage: object = None

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one chunk; the text it adds.

        Called once per token: the checks are on `dict` and `list`, what decoded JSON holds,
        not on the `Mapping` ABC, whose isinstance costs several times more.
        """
        if (usage := event.get("usage")) is not None:
            self._usage = usage
        choices = event.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choice := choices[0], dict):
            return ""
        if (finish := choice.get("finish_reason")) is not None:
            self._finish = finish
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        if calls := delta.get("tool_calls"):
            for call in calls:
                if isinstance(call, dict):
                    self._add_call_fragment(call)
        content = delta.get("content")
        if content and isinstance(content, str):
            self._text.append(content)
            return content
        return ""

    def _add_call_fragment(self, call: Mapping[str, Any]) -> None:
        index = call.get("index")
        slot = self._calls.setdefault(
            index if isinstance(index, int) else len(self._calls),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if call.get("id"):
            slot["id"] = call["id"]
        function = call.get("function")
        if isinstance(function, Mapping):
            if isinstance(function.get("name"), str):
                slot["function"]["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                slot["function"]["arguments"] += function["arguments"]

    def body(self) -> dict[str, Any]:
        """The body a non-streamed answer would have had."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        return {"choices": [{"message": message, "finish_reason": self._finish}], "usage": self._usage}


class OpenAIChatProvider(SdkProvider):
    """One model behind a Chat Completions endpoint."""

    parse_body = staticmethod(completion_from_chat)
    stream_reader: Callable[[], StreamReader] = staticmethod(ChatStreamReader)
    plan = staticmethod(openai_plan)
    """Where each request parameter goes in this API (the Responses API has its own)."""
    kind = "openai"
    completion_path = "/chat/completions"
    sdk_client = openai.AsyncOpenAI
    sdk_http_client = openai.DefaultAsyncHttpxClient
    sdk_stream = OpenAIEvents
    sdk_errors = SdkErrors(
        openai.OpenAIError, openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError
    )
    # Without include_usage a stream reports no tokens, and the token metrics would lie.
    stream_fields: ClassVar[Mapping[str, Any]] = MappingProxyType(
        {"stream": True, "stream_options": {"include_usage": True}}
    )

    def _default_base_url(self) -> str:
        return DEFAULT_BASE_URL

    def _plan_for(self, params: RequestParams) -> ParamPlan:
        return self.plan(
            params,
            native=is_native_openai(self._configured_base_url),
            capabilities=self._capabilities,
            subject=self._warning_subject(),
        )

    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": chat_messages(system, messages)}
        if wire_tools := chat_tools(tools):
            body["tools"] = wire_tools
        return body

    def _warning_subject(self) -> str:
        return f"{self._label} ({self._base_url})"
