"""Fitting the history into the context window (`agent/window.py`): where the cut falls."""

from __future__ import annotations

from pallas_api.fields import ModelCapabilities, RequestParams
from pallas_runtime.agent.window import (
    IMAGE_TOKENS,
    input_room,
    left_out,
    message_tokens,
    text_tokens,
)
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)


def user(text: str) -> UserMessage:
    return UserMessage((TextPart(text),))


def tool_turn(n: int, size: int) -> list[Message]:
    call = ToolCall(f"c{n}", "argos__search", {"q": n})
    return [
        user(f"question {n} " + "x" * size),
        AssistantMessage("", (call,)),
        ToolResultsMessage((ToolResult(call.id, call.name, (TextPart("r" * size),)),)),
        AssistantMessage(f"answer {n}"),
    ]


def test_text_counts_a_token_per_three_bytes_and_an_image_a_fixed_amount() -> None:
    assert text_tokens("") == 0
    assert text_tokens("abcd") == 2
    assert text_tokens("語") == 1  # three UTF-8 bytes
    image = UserMessage((ImagePart("A" * 3_000_000, "image/png"),))
    assert message_tokens(image) < IMAGE_TOKENS + 20  # not its base64 length


def test_what_fits_is_sent_whole_and_the_cut_falls_before_a_user_message() -> None:
    history = [*tool_turn(1, 300), *tool_turn(2, 300), *tool_turn(3, 300)]
    turn = [user("now")]
    whole = sum(message_tokens(m) for m in [*history, *turn])
    assert left_out(history, turn, whole) == 0
    # One token short: the oldest whole turn goes, never a tool result without its call.
    assert left_out(history, turn, whole - 1) == 4
    newest_turn = sum(message_tokens(m) for m in [*history[8:], *turn])
    assert left_out(history, turn, newest_turn) == 8
    assert left_out(history, turn, newest_turn - 1) == 12


def test_the_turn_in_progress_is_sent_even_when_it_alone_is_over_the_budget() -> None:
    history = tool_turn(1, 10)
    assert left_out(history, [user("y" * 10_000)], 100) == len(history)
    assert left_out([], [user("y" * 10_000)], 100) == 0


def test_the_answer_keeps_its_room_in_the_window() -> None:
    caps = ModelCapabilities(context_window=10_000, max_output_tokens=2_000)
    assert input_room(caps, RequestParams()) == 8_000
    assert input_room(caps, RequestParams(max_tokens=500)) == 9_500
    assert input_room(caps, RequestParams(max_tokens=50_000)) == 8_000  # clamped, as sent
