"""Anthropic Messages adapter on the official `anthropic` SDK.

The translation functions are pure: `messages_blocks` and `messages_tools` build the wire JSON of
a request, `completion_from_messages` reads the wire JSON of a response. The provider sends them
with `AsyncAnthropic`, whose own retries (`max_retries`, backoff honouring `retry-after`) and
timeout apply. Responses are read as JSON, like the Chat Completions adapter, so that
Anthropic-compatible servers that omit fields are read the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import anthropic

from pallas_api.fields import RequestParams
from pallas_io.llm_check import PUBLIC_APIS
from pallas_runtime.llm.adapter import SdkProvider, alternating_turns, parse_arguments, usage_counts
from pallas_runtime.llm.anthropic_sse import AnthropicEvents
from pallas_runtime.llm.errors import SdkErrors
from pallas_runtime.llm.params import ParamPlan, anthropic_plan
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

log = logging.getLogger("pallas.llm")

DEFAULT_BASE_URL = PUBLIC_APIS["anthropic"]
"""The SDK's default, passed explicitly so an ambient ANTHROPIC_BASE_URL cannot redirect the agent."""


def _content_blocks(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            # The API rejects empty text blocks.
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
                }
            )
    return blocks


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _tool_result_blocks(message: ToolResultsMessage) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_result",
            "tool_use_id": result.call_id,
            "content": _content_blocks(result.content),
            "is_error": result.is_error,
        }
        for result in message.results
    ]


def messages_blocks(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate a conversation into Messages API `messages` (`alternating_turns`).

    Tool results become a user message of `tool_result` blocks.
    """
    return alternating_turns(
        messages,
        user=_content_blocks,
        assistant=_assistant_blocks,
        results=_tool_result_blocks,
        assistant_role="assistant",
        parts="content",
    )


def messages_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The wire `tools` of a Messages API request (empty when no tools are offered)."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools
    ]


def usage_from_messages(usage: object) -> Usage:
    """Map Messages API usage onto token kinds.

    Anthropic counts cached prompt tokens apart from `input_tokens`, so each field maps straight
    across: `input_tokens` → input, `output_tokens` → output, `cache_read_input_tokens` →
    cache_read, `cache_creation_input_tokens` → cache_write. Thinking tokens are part of
    `output_tokens` and not reported apart, so `reasoning` stays 0. Missing or null counts are 0.
    """
    return usage_counts(
        usage, "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"
    )


def completion_from_messages(body: Mapping[str, Any]) -> Completion:
    """Translate a Messages API response body into a Completion.

    Text blocks are concatenated; `tool_use` blocks become tool calls, and an `input` that is not
    an object gives `arguments={}` with `arguments_error` instead of raising. Other blocks
    (thinking, server tools) are not part of the neutral conversation and are skipped.

    Raises:
        ValueError: The body has no `content` list.
    """
    content = body.get("content")
    if not isinstance(content, list):
        raise ValueError("the response has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            arguments, error = parse_arguments(block.get("input"))
            calls.append(
                ToolCall(
                    id=str(block.get("id") or f"toolu_{index}"),
                    name=str(block.get("name") or ""),
                    arguments=arguments,
                    arguments_error=error,
                )
            )
    stop_reason = body.get("stop_reason")
    return Completion(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=usage_from_messages(body.get("usage")),
        stop_reason=str(stop_reason) if stop_reason is not None else None,
    )


class MessagesStreamReader:
    """A Messages API stream (message_start … message_stop events) folded into a response body.

    Content blocks are rebuilt by index: text deltas appended, a `tool_use` block's
    `input_json_delta` fragments joined and parsed when the block stops (left as text when they
    are not JSON, which the parser reports as the call's `arguments_error`); the usage is
    `message_start`'s, updated by `message_delta`'s.
    """

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._texts: dict[int, list[str]] = {}
        """Text deltas by block, joined once in `body` (a string grown per token is quadratic)."""
        self._partial: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop: object = None

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; the text it adds.

        Called once per token: the delta comes first, and the checks are on `dict`, what
        decoded JSON holds, not on the `Mapping` ABC, whose isinstance costs several times more.
        """
        kind, index = event.get("type"), event.get("index")
        if kind == "content_block_delta" and isinstance(index, int):
            delta = event.get("delta")
            return self._delta(index, delta) if isinstance(delta, dict) else ""
        if kind == "message_start" and isinstance(message := event.get("message"), dict):
            self._merge_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._stop = delta["stop_reason"]
            self._merge_usage(event.get("usage"))
        elif not isinstance(index, int):
            return ""
        elif kind == "content_block_start" and isinstance(block := event.get("content_block"), dict):
            self._blocks[index] = dict(block)
            if block.get("type") == "tool_use":
                self._partial[index] = []
        elif kind == "content_block_stop" and index in self._partial:
            raw = "".join(self._partial.pop(index))
            try:
                self._blocks[index]["input"] = json.loads(raw) if raw.strip() else {}
            except ValueError:
                self._blocks[index]["input"] = raw
        return ""

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str):
                self._blocks.setdefault(index, {"type": "text", "text": ""})
                self._texts.setdefault(index, []).append(text)
                return text
        elif kind == "input_json_delta" and isinstance(fragment := delta.get("partial_json"), str):
            self._blocks.setdefault(index, {"type": "text", "text": ""})
            self._partial.setdefault(index, []).append(fragment)
        return ""

    def _merge_usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def body(self) -> dict[str, Any]:
        """The body a non-streamed answer would have had."""
        for index, texts in self._texts.items():
            block = self._blocks[index]
            block["text"] = str(block.get("text") or "") + "".join(texts)
        self._texts.clear()
        content = [self._blocks[i] for i in sorted(self._blocks)]
        return {"content": content, "stop_reason": self._stop, "usage": self._usage}


class AnthropicMessagesProvider(SdkProvider):
    """One Claude model (or an Anthropic-compatible server) behind the Messages API."""

    parse_body = staticmethod(completion_from_messages)
    stream_reader = staticmethod(MessagesStreamReader)
    kind = "anthropic"
    completion_path = "/v1/messages"
    sdk_client: ClassVar[type[Any]] = anthropic.AsyncAnthropic
    sdk_http_client = anthropic.DefaultAsyncHttpxClient
    sdk_errors = SdkErrors(
        anthropic.AnthropicError,
        anthropic.APITimeoutError,
        anthropic.APIConnectionError,
        anthropic.APIStatusError,
    )
    sdk_stream: ClassVar[type[Any]] = AnthropicEvents

    def _default_base_url(self) -> str:
        return DEFAULT_BASE_URL

    def _plan_for(self, params: RequestParams) -> ParamPlan:
        return anthropic_plan(
            params, model=self._model, capabilities=self._capabilities, subject=self._warning_subject()
        )

    def _request_body(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": messages_blocks(messages)}
        if system:
            body["system"] = system
        if wire_tools := messages_tools(tools):
            body["tools"] = wire_tools
        return body
