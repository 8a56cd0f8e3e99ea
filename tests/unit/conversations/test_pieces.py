"""The pure pieces of conversations: the codec, where to cut, titles, caller ids."""

from __future__ import annotations

import json

import pytest

from pallas_runtime.conversations import codec
from pallas_runtime.conversations.caller import checked_id, one_turn_key, peer_conversation_id
from pallas_runtime.conversations.history import first_kept, title_of
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    TurnFailure,
    UserMessage,
)
from tests.support.conversations import turn


def test_every_message_kind_survives_the_codec_through_json() -> None:
    call = ToolCall("c1", "argos__search", {"q": "x", "n": [1, 2]}, None)
    bad_call = ToolCall("c2", "argos__search", {}, "not a JSON object")
    messages = [
        UserMessage((TextPart("hi"), ImagePart("aGk=", "image/png"))),
        AssistantMessage("thinking", (call, bad_call)),
        ToolResultsMessage((ToolResult("c1", "argos__search", (TextPart("r"),), is_error=True),)),
        AssistantMessage("done"),
        UserMessage((TextPart("and then?"),)),
        TurnFailure("AGENT_SHUTTING_DOWN", "the agent stopped before this turn finished"),
    ]
    assert [codec.decode(json.loads(json.dumps(codec.encode(m)))) for m in messages] == messages


@pytest.mark.parametrize(
    "garbage",
    [{}, {"role": "system"}, {"role": "user"}, {"role": "tool", "results": 3}, {"role": "failure"}],
)
def test_a_foreign_row_is_a_clear_value_error(garbage: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not a stored message"):
        codec.decode(garbage)


def test_a_conversation_is_cut_only_before_a_user_message() -> None:
    roles = [m.role for m in turn(1, with_tools=True) + turn(2) + turn(3, with_tools=True)]
    assert first_kept(roles, 100) == 0
    assert first_kept(roles, 5) == 6  # the last turn, whole
    # No user message fits the limit: the newest turn stays whole rather than orphan results.
    assert first_kept([m.role for m in turn(1, with_tools=True)], 2) == 0


def test_a_title_is_the_start_of_the_first_user_message_on_one_line() -> None:
    long = UserMessage((TextPart("What did\nPlato say about " + "justice " * 20),))
    title = title_of([long])
    assert title.startswith("What did Plato say about justice")
    assert len(title) == 80
    assert title.endswith("…")
    assert title_of([AssistantMessage("no user here")]) == ""


def test_conversation_ids_are_bounded_and_printable() -> None:
    assert checked_id("a" * 256) == "a" * 256
    with pytest.raises(ValueError, match="257 characters long; the limit is 256"):
        checked_id("a" * 257)
    with pytest.raises(ValueError, match="control characters"):
        checked_id("bad\nid")


def test_peer_conversation_ids_separate_callers_conversations_and_peers() -> None:
    alice = ConversationKey("orchestrator", "sub:alice", "c1")
    bob = ConversationKey("orchestrator", "sub:bob", "c1")
    ids = {
        peer_conversation_id(alice, "research"),
        peer_conversation_id(bob, "research"),
        peer_conversation_id(alice, "writer"),
        peer_conversation_id(ConversationKey("orchestrator", "sub:alice", "c2"), "research"),
    }
    assert len(ids) == 4
    assert peer_conversation_id(alice, "research") == peer_conversation_id(alice, "research")
    assert all(len(i) <= 256 for i in ids)
    assert one_turn_key("o", "anonymous") != one_turn_key("o", "anonymous")
