"""A turn that keeps no conversation hands its peers an id of one turn, and they keep nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pallas_runtime.agent.loop import TurnResult
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.agent.turn import Turn
from pallas_runtime.agent.turns import Conversations
from pallas_runtime.conversations.caller import Caller, one_turn_key, peer_conversation_id
from pallas_runtime.conversations.memory import MemoryStore
from pallas_runtime.conversations.model import ConversationKey
from pallas_runtime.messages import AssistantMessage, Message, TextPart, UserMessage


class _Tools:
    async def release(self, key: ConversationKey) -> None:
        pass


class _Loop:
    """An agent loop answering at once; it remembers each turn's conversation."""

    def __init__(self) -> None:
        self.tools = _Tools()
        self.seen: list[ConversationKey | None] = []

    async def run(self, history: Sequence[Message], user: UserMessage, turn: Turn) -> TurnResult:
        self.seen.append(turn.conversation)
        return TurnResult("ok", [user, AssistantMessage("ok")])


def test_a_turn_keeping_nothing_hands_its_peers_an_id_of_one_turn() -> None:
    once = peer_conversation_id(one_turn_key("default/local/flow", "anonymous"), "writer")
    kept = peer_conversation_id(ConversationKey("default/local/flow", "anonymous", "c1"), "writer")
    assert once.startswith("once-pallas-flow-")
    assert kept.startswith("pallas-flow-")
    assert len(once) <= 256


async def test_a_peer_given_an_id_of_one_turn_keeps_nothing_and_hands_on_one_turn_ids() -> None:
    store = MemoryStore(max_conversations=10, max_messages=10)
    conversations = Conversations("default/local/writer", "caller", store)
    loop: Any = _Loop()
    turn = Turn(Caller("anonymous"), None, ProgressReporter("writer", None))
    user = UserMessage((TextPart("hi"),))

    once = peer_conversation_id(one_turn_key("default/local/flow", "anonymous"), "writer")
    reply = await conversations.send(loop, turn, user, conversation_id=once, session_id=None)
    assert reply.conversation_id is None
    assert await store.count("default/local/writer") == 0
    assert loop.seen[0].id.startswith("once-")  # and its own peers keep nothing either

    kept = peer_conversation_id(ConversationKey("default/local/flow", "anonymous", "c1"), "writer")
    reply = await conversations.send(loop, turn, user, conversation_id=kept, session_id=None)
    assert reply.conversation_id == kept
    assert await store.count("default/local/writer") == 1
