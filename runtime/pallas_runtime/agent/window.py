"""Fitting a conversation into the model's context window before each LLM call.

A conversation longer than the window made every later turn fail with the provider's HTTP 400,
for good. Before each call the oldest turns of the stored history are left out until the rest
fits; the turn in progress (the newest user message and what followed it) is always sent, and
a cut falls only before a user message, so no tool result loses its call. The stored history is
not touched.

Tokens are estimated, not counted: no tokenizer is shipped (one per model family, downloaded at
run time, which pods cannot do), and the estimate only has to err on the safe side. Text counts
one token per 3 UTF-8 bytes: about 4 for English prose, so a third of safety margin, and about
right for CJK text (3 bytes a character, a token or so each); an image counts as
`IMAGE_TOKENS` whatever its size (providers scale images down to roughly that); each message and
each tool call or result adds `OVERHEAD_TOKENS` for the framing around it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.messages import (
    AssistantMessage,
    ContentPart,
    Message,
    TextPart,
    ToolSpec,
    TurnFailure,
    UserMessage,
)

BYTES_PER_TOKEN = 3
IMAGE_TOKENS = 2000
"""Anthropic bills at most ~1,600 tokens for an image it has scaled down; OpenAI ~1,100 at high detail."""
OVERHEAD_TOKENS = 8


def text_tokens(text: str) -> int:
    """The estimated tokens of `text` (rounded up)."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def _parts(parts: Sequence[ContentPart]) -> int:
    return sum(text_tokens(p.text) if isinstance(p, TextPart) else IMAGE_TOKENS for p in parts)


def message_tokens(message: Message) -> int:
    """The estimated tokens `message` takes in a request."""
    if isinstance(message, UserMessage):
        return OVERHEAD_TOKENS + _parts(message.content)
    if isinstance(message, AssistantMessage):
        calls = sum(
            OVERHEAD_TOKENS + text_tokens(c.name) + text_tokens(json.dumps(c.arguments))
            for c in message.tool_calls
        )
        return OVERHEAD_TOKENS + text_tokens(message.text) + calls
    if isinstance(message, TurnFailure):
        return 0  # never sent (the LLM adapters leave it out)
    return OVERHEAD_TOKENS + sum(
        OVERHEAD_TOKENS + text_tokens(r.name) + _parts(r.content) for r in message.results
    )


def request_tokens(system: str, tools: Sequence[ToolSpec]) -> int:
    """The estimated tokens of what every request of a turn carries besides its messages."""
    schemas = json.dumps([[t.name, t.description, t.input_schema] for t in tools])
    return text_tokens(system) + text_tokens(schemas) + OVERHEAD_TOKENS * (1 + len(tools))


def answer_room(capabilities: ModelCapabilities, params: RequestParams) -> int:
    """Tokens kept for a call's answer (also the most its answer can spend).

    The call's `maxTokens` (clamped, as the adapters clamp it), else the model's `maxOutputTokens`.
    """
    return min(params.max_tokens or capabilities.max_output_tokens, capabilities.max_output_tokens)


def input_room(capabilities: ModelCapabilities, params: RequestParams) -> int:
    """Tokens a request's input may take: the window less the room kept for the answer.

    An answer cut short for lack of room is a failure too.
    """
    return capabilities.context_window - answer_room(capabilities, params)


def left_out(history: Sequence[Message], turn: Sequence[Message], room: int) -> int:
    """How many of the history's oldest messages to leave out so the rest and `turn` fit.

    The cut falls before a user message (whole turns go), the oldest first.

    Args:
        history: The stored messages, oldest first.
        turn: The turn in progress (its user message first); always sent, even when it alone
            is over the room (the provider then says so, and nothing is stored).
        room: Tokens for the messages (`input_room` less `request_tokens`).

    Returns:
        0 when it all fits, `len(history)` when no whole turn of it does.
    """
    room -= sum(message_tokens(m) for m in turn)
    used = 0
    # From the newest back: the walk stops at the first message that does not fit, so a long
    # history costs what the window holds, not what the store keeps.
    for index in range(len(history) - 1, -1, -1):
        used += message_tokens(history[index])
        if used > room:
            start = index + 1
            break
    else:
        return 0
    while start < len(history) and history[start].role != "user":
        start += 1
    return start
