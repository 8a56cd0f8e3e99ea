"""A `send_message` turn over a conversation store: the key, the hold, the loop, the commit.

The conversation is `conversation_id` when given, else the MCP session (legacy stateful
sessions), else none (nothing kept). It belongs to the caller. The turn holds the conversation
from reading its history to storing the turn, so turns of one conversation run one at a time
wherever they run; a turn that fails or is cancelled stores nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pallas_runtime.agent.loop import AgentLoop, TurnResult
from pallas_runtime.agent.progress import ProgressReporter
from pallas_runtime.conversations.caller import Caller, one_turn_key
from pallas_runtime.conversations.history import title_of
from pallas_runtime.conversations.model import ConversationKey, ConversationStore, ThreadInfo
from pallas_runtime.messages import Message, UserMessage


class NoConversation(ValueError):
    """A history or delete request that names no conversation of this caller."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer of one turn, and the conversation it was stored in (None: not kept)."""

    text: str
    conversation_id: str | None
    turn: Sequence[Message] = ()
    """The turn's messages (the user message, then every assistant and tool message)."""
    created: bool = False
    """This turn started the conversation."""


def conversation_key(
    agent: str, caller: Caller, conversation_id: str | None, session_id: str | None
) -> ConversationKey | None:
    """The key of the conversation a request names, or None when it names none."""
    if conversation_id:
        return ConversationKey(agent, caller.owner, conversation_id)
    if session_id:
        return ConversationKey(agent, caller.owner, f"session:{session_id}")
    return None


class Conversations:
    """What the agent's MCP surface does with conversations."""

    def __init__(self, agent: str, store: ConversationStore, loop: AgentLoop) -> None:
        self._agent = agent
        self.store = store
        self._loop = loop

    async def send(
        self,
        caller: Caller,
        user: UserMessage,
        *,
        conversation_id: str | None,
        session_id: str | None,
        inbound_auth: str | None,
        progress: ProgressReporter,
    ) -> Reply:
        """Run one turn; store it when the request names a conversation.

        Raises:
            ConversationBusy, StoreUnavailable, TurnLost: from the store (nothing stored).
            LLMError, MaxIterationsExceeded: from the loop (nothing stored).
        """
        key = conversation_key(self._agent, caller, conversation_id, session_id)
        if key is None:
            turn = await self._run([], user, one_turn_key(self._agent, caller.owner), inbound_auth, progress)
            return Reply(turn.text, None, turn.messages)
        async with self.store.turn(key) as held:
            turn = await self._run(held.history, user, key, inbound_auth, progress)
            await held.commit(turn.messages, title_of([user]))
        return Reply(turn.text, key.id, turn.messages, created=not held.history)

    async def _run(
        self,
        history: Sequence[Message],
        user: UserMessage,
        key: ConversationKey,
        inbound_auth: str | None,
        progress: ProgressReporter,
    ) -> TurnResult:
        return await self._loop.run(
            history, user, inbound_auth=inbound_auth, progress=progress, conversation=key
        )

    async def history(
        self, caller: Caller, conversation_id: str | None, session_id: str | None
    ) -> list[Message]:
        """The caller's stored conversation.

        Raises:
            NoConversation: none named, or none stored under that name for this caller.
        """
        key = conversation_key(self._agent, caller, conversation_id, session_id)
        if key is None:
            raise NoConversation(
                "no conversation: pass conversation_id, or ask within the MCP session you chatted in"
            )
        messages = await self.store.history(key)
        if messages is None:
            what = f"conversation_id {conversation_id!r}" if conversation_id else "this MCP session"
            raise NoConversation(f"no stored conversation for {what}")
        return messages

    async def threads(self, caller: Caller) -> list[ThreadInfo]:
        """The caller's conversations, most recent first."""
        return await self.store.threads(self._agent, caller.owner)

    async def delete(self, caller: Caller, conversation_id: str) -> None:
        """Forget one of the caller's conversations.

        Raises:
            NoConversation: the caller has no conversation of that id.
        """
        if not await self.store.delete(ConversationKey(self._agent, caller.owner, conversation_id)):
            raise NoConversation(f"no stored conversation for conversation_id {conversation_id!r}")
