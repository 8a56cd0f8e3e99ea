"""Provider-neutral conversation types shared by the agent loop, the LLM adapters and MCP edges.

Translation to and from each wire format happens only at the edges (llm/openai_chat.py,
llm/anthropic_messages.py, downstream/); everything in between speaks these types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class TextPart:
    """Text in a message."""

    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image in a message (base64 data and its MIME type)."""

    data: str
    """Base64 (standard alphabet, no data: prefix)."""
    mime_type: str


ContentPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    `arguments_error` is set (and `arguments` empty) when the model produced arguments that are not
    a JSON object; the loop answers such a call with an error result instead of dispatching it.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None
    signature: str | None = None
    """The provider's opaque token for the reasoning behind the call (Gemini 3's
    `thoughtSignature`), sent back verbatim with the call on later requests: Gemini 3 refuses
    a conversation whose function calls lost theirs."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, as given back to the model."""

    call_id: str
    name: str
    content: tuple[ContentPart, ...]
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class UserMessage:
    """What the caller said."""

    content: tuple[ContentPart, ...]
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """What the model said: text and tool calls."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"
    signature: str | None = None
    """The provider's opaque reasoning token that came with the text (Gemini's
    `thoughtSignature` on a text part), sent back with it; None for most providers."""


@dataclass(frozen=True, slots=True)
class ToolResultsMessage:
    """The results of one round of tool calls, in the order the calls were made."""

    results: tuple[ToolResult, ...]
    role: Literal["tool"] = "tool"


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """A turn kept without an answer: it failed, or the agent stopped while it ran (after its question).

    The conversation keeps it so the turn is not lost silently: the history prompt shows it, and
    no LLM adapter sends it (the next turn's model sees the question left unanswered).
    """

    code: str
    """An `ErrorCode` value (e.g. `AGENT_SHUTTING_DOWN`)."""
    message: str
    role: Literal["failure"] = "failure"


Message = UserMessage | AssistantMessage | ToolResultsMessage | TurnFailure


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: `<server>__<tool>` or `<agent>__send_message`."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one LLM request used, by kind."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0
    cache_hit: int = 0
    """Prompt tokens a server reports as cache hits under that name (DeepSeek's
    `prompt_cache_hit_tokens`), not as `cached_tokens`; priced and budgeted as cache reads."""

    def by_kind(self) -> dict[str, int]:
        """Token counts keyed by the `kind` label of pallas_llm_tokens_total."""
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cache_hit": self.cache_hit,
            "reasoning": self.reasoning,
        }


@dataclass(frozen=True, slots=True)
class Completion:
    """One model turn: final text, tool calls to make, or both."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    signature: str | None = None
    """The reasoning token that came with the text (`AssistantMessage.signature`)."""


TextSink = Callable[[str], Awaitable[None]]
"""Where a streamed completion's text goes as it arrives, one piece at a time."""
